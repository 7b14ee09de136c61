"""The clip embedder on a local checkpoint, with no network: in a subprocess whose sockets
refuse to connect (and in its own empty network namespace where ``unshare -n`` works),
then inside the real actor behind a real broker.

The checkpoint is made here (open_clip random init of the smallest config): no weights can
be downloaded on this machine, and none are needed to show that loading and embedding
work offline. Skipped where the ``clip`` extra is not installed (CI installs it).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from PIL import Image, ImageDraw

from messages.loop import LoopVerdict, ObserveStep
from tests.conftest import ROOT, Spawn, python_argv, wait_until
from tests.integration.probes import serves
from transport.client import SyncClient

pytestmark = pytest.mark.skipif(importlib.util.find_spec("open_clip") is None,
                                reason="the clip extra is not installed")

MODEL = "ViT-S-32-alt"  # the smallest open_clip config (42M parameters)

NO_NETWORK = textwrap.dedent("""
    # Every connection attempt is written down and refused (AF_UNIX aside).
    import os, socket
    _connect = socket.socket.connect
    def _refuse(self, address):
        if self.family == getattr(socket, "AF_UNIX", None):
            return _connect(self, address)
        with open(os.environ["NET_ATTEMPTS"], "a") as log:
            log.write(repr(address) + "\\n")
        raise OSError(101, "network disabled by the test")
    socket.socket.connect = _refuse
    socket.socket.connect_ex = lambda self, address: _refuse(self, address)
""")

PROBE = textwrap.dedent("""
    import io, json, os, sys
    assert "HF_HUB_OFFLINE" not in os.environ
    from PIL import Image, ImageDraw
    from actors.loop_detector import clip
    def shot(text, fmt):
        image = Image.new("RGB", (1920, 1080), (236, 239, 244))
        ImageDraw.Draw(image).text((200, 300), text, fill=(0, 0, 0))
        out = io.BytesIO(); image.save(out, fmt); return out.getvalue()
    embedder = clip.ClipEmbedder(sys.argv[1], sys.argv[2])
    a, b = embedder.embed(shot("Dupont", "PNG")), embedder.embed(shot("Dupont", "PNG"))
    c = embedder.embed(shot("Dupont", "JPEG"))
    dark = Image.new("RGB", (1920, 1080), (10, 10, 10)); out = io.BytesIO()
    dark.save(out, "PNG"); d = embedder.embed(out.getvalue())
    again = clip.ClipEmbedder(sys.argv[1], sys.argv[2]); again.load()
    try:
        clip.ClipEmbedder(sys.argv[1], sys.argv[2] + ".nope").load()
        missing = None
    except clip.ClipUnavailable as exc:
        missing = str(exc)
    print(json.dumps({"dim": int(a.shape[0]), "norm": float((a * a).sum()) ** 0.5,
                      "same": clip.cosine(a, b), "jpeg": clip.cosine(a, c),
                      "dark": clip.cosine(a, d), "loaded": len(clip._CACHE),
                      "offline": os.environ.get("HF_HUB_OFFLINE"), "missing": missing}))
""")


def _isolated(argv: list[str]) -> list[str]:
    """``argv`` in an empty network namespace when this machine allows it."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n", *argv]
    return argv


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clip") / f"{MODEL}-random.pt"
    make = ("import os, sys; os.environ['HF_HUB_OFFLINE'] = '1'\n"
            "import open_clip, torch\n"
            "torch.save(open_clip.create_model(sys.argv[1]).state_dict(), sys.argv[2])\n")
    subprocess.run([sys.executable, "-c", make, MODEL, str(path)], check=True, timeout=300,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return path


def test_clip_loads_a_local_checkpoint_with_no_network(checkpoint: Path,
                                                       tmp_path: Path) -> None:
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(NO_NETWORK)
    attempts = tmp_path / "attempts.log"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(PYTHONPATH=f"{guard}{os.pathsep}{ROOT}", NET_ATTEMPTS=str(attempts))
    done = subprocess.run(_isolated([sys.executable, "-c", PROBE, MODEL, str(checkpoint)]),
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert not attempts.exists(), attempts.read_text()
    assert out["offline"] == "1"  # set by the embedder before importing open_clip
    assert out["dim"] == 256 and abs(out["norm"] - 1.0) < 1e-4  # ViT-S-32-alt embeds in 256
    assert out["same"] == pytest.approx(1.0, abs=1e-6)
    assert out["jpeg"] > out["dark"]  # the same screen is nearer than a black one
    assert out["loaded"] == 1  # a second embedder of the same checkpoint reuses the model
    assert "is not a file" in out["missing"]


def _screen(text: str) -> bytes:
    image = Image.new("RGB", (640, 400), (236, 239, 244))
    ImageDraw.Draw(image).text((48, 130), text, fill=(0, 0, 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def clip_actor(spawn: Spawn, lea_env: dict[str, str], checkpoint: Path
               ) -> Iterator[tuple[SyncClient, dict[str, str]]]:
    env = dict(lea_env, RPA_LOOP_EMBEDDER="clip", RPA_LOOP_CLIP_MODEL=MODEL,
               RPA_LOOP_CLIP_PRETRAINED=str(checkpoint))
    spawn(python_argv("-m", "broker"), env=env, name="broker")
    proc = spawn(python_argv("-m", "actors", "loop_detector"), env=env, name="loop_detector")
    ctx: zmq.Context[Any] = zmq.Context()
    client = SyncClient(env["LEA_MDP_ENDPOINT"], ctx)
    wait_until(lambda: serves(client, "loop_detector"),
               timeout=30)
    yield client, env
    assert proc.poll() is None
    client.close()
    ctx.term()


def test_actor_with_clip_vetoes_nothing_on_a_static_screen(
        clip_actor: tuple[SyncClient, dict[str, str]]) -> None:
    client, _env = clip_actor
    same = _screen("Dupont")

    def observe(i: int, replay: str) -> LoopVerdict:
        reply = client.call("loop_detector", ObserveStep(
            replay_id=replay, action_id=f"a{i}", base_action_id=f"a{i}",
            action_type="click", target={"by_text": f"b{i}"}, success=True,
            screenshot_after=same), timeout_s=10.0).body
        assert isinstance(reply, LoopVerdict)
        return reply

    # The model loads on a thread: until then signal A runs on the pixel measure alone.
    # Once it is loaded, a static screen's verdict carries CLIP's cosine.
    replay = 0

    def loaded_verdict() -> LoopVerdict | None:
        nonlocal replay
        replay += 1
        verdicts = [observe(i, f"r{replay}") for i in range(4)]
        assert [v.detected for v in verdicts] == [False, False, False, True]
        return verdicts[3] if verdicts[3].evidence["embedder"] == "pixel+clip" else None

    verdict = wait_until(loaded_verdict, timeout=120, interval=0.5)
    assert isinstance(verdict, LoopVerdict)
    assert verdict.signal == "screen_static"
    assert verdict.evidence["min_cosine"] == pytest.approx(1.0, abs=1e-4)
