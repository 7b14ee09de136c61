"""The ``clip`` embedder: open-clip-torch on a local checkpoint, as "same kind of screen".

Why CLIP never decides "nothing changed" on its own (docs/screens-and-pauses.md): a global
embedding of a 1920x1080 screen does not see ten characters typed into a field (cosine
1 - 1.5e-6 with ViT-B-32) nor a small sidebar change (exactly 1.0). A cosine threshold on
it would pause a working agent. So with ``clip``, signal A still needs the pixel measure to
find no progress, and CLIP may only *veto* a pause: when two captures of the window are not
the same kind of screen (cosine below ``RPA_LOOP_SCREEN_STATIC_THRESHOLD``), the screen
is not static. CLIP can make signal A more careful, never quicker.

Requirements: the ``clip`` extra (``pip install .[clip]``), a model name
(``RPA_LOOP_CLIP_MODEL``, default ViT-B-32) and a local checkpoint file
(``RPA_LOOP_CLIP_PRETRAINED``). ``HF_HUB_OFFLINE`` is set to 1 unless already set, before
open_clip is imported: nothing is downloaded, ever. The whole screen is seen
(``image_resize_mode='squash'``; the default centre crop loses ~22% of each side).
The model is loaded once per process (``load`` is idempotent and thread-safe).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from actors.loop_detector.pixel import BadScreenshot, open_screenshot

Vector = npt.NDArray[np.float32]


class ClipUnavailable(RuntimeError):
    """The clip embedder cannot run here (extra not installed, no or bad checkpoint)."""


@dataclass(frozen=True, slots=True)
class _Loaded:
    model: Any
    preprocess: Any
    torch: Any


_CACHE: dict[tuple[str, str], _Loaded] = {}
_CACHE_LOCK = threading.Lock()


def _load(model_name: str, pretrained: str) -> _Loaded:
    key = (model_name, str(Path(pretrained).resolve()))
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        if not Path(pretrained).is_file():
            raise ClipUnavailable(f"checkpoint {pretrained!r} is not a file")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import open_clip
            import torch
        except ImportError as exc:
            raise ClipUnavailable(f"the clip extra is not installed ({exc})") from None
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                model_name, pretrained=pretrained, image_resize_mode="squash")
        except Exception as exc:  # unknown model, wrong checkpoint, corrupt file ...
            raise ClipUnavailable(f"cannot load {model_name} from {pretrained!r}: "
                                  f"{type(exc).__name__}: {exc}") from None
        model.eval()
        loaded = _CACHE[key] = _Loaded(model, preprocess, torch)
        return loaded


class ClipEmbedder:
    """Screenshot bytes → unit CLIP image embedding."""

    name = "clip"

    def __init__(self, model_name: str, pretrained: str) -> None:
        self.model_name = model_name
        self.pretrained = pretrained
        self._loaded: _Loaded | None = None
        self.error: str | None = None

    @property
    def ready(self) -> bool:
        return self._loaded is not None

    def load(self) -> None:
        """Load the model (once per process); raises :class:`ClipUnavailable`."""
        if self._loaded is None:
            try:
                self._loaded = _load(self.model_name, self.pretrained)
            except ClipUnavailable as exc:
                self.error = str(exc)
                raise

    def embed(self, data: bytes) -> Vector:
        """The embedding of the screenshot in ``data``; loads the model if needed."""
        self.load()
        assert self._loaded is not None
        image = open_screenshot(data)
        try:
            # The model sees 224x224: decode a JPEG at reduced scale, it is much faster.
            image.draft("RGB", (448, 448 * image.height // max(1, image.width)))
            rgb = image.convert("RGB")
        except (OSError, ValueError, SyntaxError) as exc:
            raise BadScreenshot(f"cannot decode the screenshot: {exc}") from None
        torch = self._loaded.torch
        with torch.no_grad():
            batch = self._loaded.preprocess(rgb).unsqueeze(0)
            vector = self._loaded.model.encode_image(batch)[0]
            vector = vector / vector.norm().clamp_min(1e-12)
        out: Vector = vector.detach().cpu().numpy().astype(np.float32)
        return out


def cosine(a: Vector, b: Vector) -> float:
    """Cosine similarity of two unit vectors."""
    return float(np.dot(a, b))
