"""The ``pixel`` embedder: a screenshot as a small grayscale image cut into tiles. No model.

A 1920x1080 screen becomes a 480x270 grayscale image (each pixel the mean of a 4x4 block),
cut into 2x2 tiles (8x8 screen pixels: about one typed character; a text field's border
and its text fall in different tiles); the agent's 1280-wide JPEG a 320-wide one (tiles
of 8 of its pixels). Two frames are compared tile by tile: a tile
*changed* when some reduced pixel of it moved by more than ``PixelParams.level`` grey
levels. After the 4x4 averaging a typed character
moves some reduced pixel by 37 ('.') to 130 ('1') levels, a caret by 64, while JPEG noise
stays at or below 5 even at quality 50 (bench/loop_eval.py prints both), so small real
changes are seen and compression noise is not. What counts as progress is decided over a
history of frames (:mod:`actors.loop_detector.screen_history`).

JPEG screenshots are decoded at reduced scale (libjpeg's DCT scaling, ``Image.draft``),
which costs a few milliseconds; a PNG must be fully decoded first.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

Frame = npt.NDArray[np.uint8]
"""A reduced grayscale screenshot (rows x columns)."""
TileMap = npt.NDArray[np.uint8]
"""One value per tile (rows of tiles x columns of tiles)."""

MAX_PIXELS: Final = 8192 * 8192
"""Larger screenshots are refused (a decompression bomb is not a screen)."""
MIN_SIDE: Final = 16


class BadScreenshot(ValueError):
    """Bytes that do not decode into a screenshot we can measure."""


@dataclass(frozen=True, slots=True)
class PixelParams:
    """The pixel measure's constants (not env vars: they are properties of the measure)."""

    min_width: int = 300
    """Screens are reduced by the largest power of two that leaves them at least this wide
    (1920 → 480, the agent's 1280-wide JPEG → 320): a JPEG then decodes straight at that
    scale (libjpeg's DCT scaling), with no resize after."""
    tile: int = 2
    """Tile side in reduced pixels (8 screen pixels at 1920x1080)."""
    level: int = 20
    """A tile changed when a reduced pixel of it moved by more than this (0-255)."""


DEFAULT_PIXEL = PixelParams()


def reduction(width: int, params: PixelParams) -> int:
    """The power of two by which a ``width``-wide screen is reduced (``min_width``)."""
    factor = 1
    while width // (factor * 2) >= params.min_width:
        factor *= 2
    return factor


def open_screenshot(data: bytes) -> Image.Image:
    """The image in ``data`` (PNG or JPEG), checked but not decoded yet."""
    try:
        image = Image.open(io.BytesIO(data))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise BadScreenshot(f"not an image: {exc}") from None
    if image.format not in ("PNG", "JPEG"):
        raise BadScreenshot(f"expected PNG or JPEG, got {image.format}")
    width, height = image.size
    if width < MIN_SIDE or height < MIN_SIDE or width * height > MAX_PIXELS:
        raise BadScreenshot(f"unusable screenshot size {width}x{height}")
    return image


def reduce_screenshot(data: bytes, params: PixelParams = DEFAULT_PIXEL) -> Frame:
    """``data`` as a reduced grayscale frame; raises :class:`BadScreenshot`."""
    image = open_screenshot(data)
    factor = reduction(image.width, params)
    target = (-(-image.width // factor), -(-image.height // factor))
    try:
        if image.format == "JPEG":
            image.draft("L", target)  # decode at 1/2, 1/4 or 1/8 scale directly
        gray = image.convert("L")
        if gray.size != target:
            exact = gray.width % target[0] == 0 and gray.height % target[1] == 0 \
                and gray.width // target[0] == gray.height // target[1]
            gray = gray.reduce(gray.width // target[0]) if exact else gray.resize(
                target, Image.Resampling.BOX)
        return np.asarray(gray, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise BadScreenshot(f"cannot decode the screenshot: {exc}") from None


def tile_max(values: Frame, tile: int) -> TileMap:
    """The maximum of each ``tile`` x ``tile`` block (edges padded with zeros)."""
    rows, cols = values.shape
    pad_r, pad_c = -rows % tile, -cols % tile
    if pad_r or pad_c:
        values = np.pad(values, ((0, pad_r), (0, pad_c)))
    # Strided maxima: much faster than reshape().max() over axes of length 5.
    across = values[:, 0::tile].copy()
    for k in range(1, tile):
        np.maximum(across, values[:, k::tile], out=across)
    out = across[0::tile].copy()
    for k in range(1, tile):
        np.maximum(out, across[k::tile], out=out)
    return out


def tile_difference(a: Frame, b: Frame, params: PixelParams = DEFAULT_PIXEL) -> TileMap:
    """Per tile, the largest absolute difference between two frames of the same shape."""
    diff = np.maximum(a, b)
    diff -= np.minimum(a, b)
    return tile_max(diff, params.tile)


def tiles_changed(a: Frame, b: Frame, params: PixelParams = DEFAULT_PIXEL
                  ) -> npt.NDArray[np.bool_]:
    """Per tile, whether it changed between ``a`` and ``b``."""
    changed: npt.NDArray[np.bool_] = tile_difference(a, b, params) > params.level
    return changed


class PixelEmbedder:
    """Screenshot bytes → reduced grayscale frame; needs no model and no warm-up."""

    name = "pixel"

    def __init__(self, params: PixelParams = DEFAULT_PIXEL) -> None:
        self.params = params

    def frame(self, data: bytes) -> Frame:
        return reduce_screenshot(data, self.params)
