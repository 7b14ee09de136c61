"""The loop detector on the recorded real-application set (tests/data/loop_real/, recorded
from real programs under Xvfb by bench/loop_real/record.py), fed as the running system
feeds it: the agent's JPEG, the action, the point clicked, the window and focus.

Never a pause on a sequence whose application state changed to the end; the stuck ones
paused, nearly all within N captures of the stuck behaviour starting (bench/loop_eval.py
prints each one that is not, and why)."""

from __future__ import annotations

from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore
from actors.loop_detector.pixel import PixelEmbedder
from bench.loop_real.dataset import load

N = LoopConfig().screen_static_n


def first_pauses() -> list[tuple[str, int | None, int | None, str]]:
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    out = []
    for k, seq in enumerate(load()):
        first, message = None, ""
        for i, step in enumerate(seq.steps(f"r{k}")):
            verdict = core.observe(step).verdict
            if verdict.detected and first is None:
                first, message = i, verdict.pause_message()
        core.forget(f"r{k}")
        out.append((seq.name, seq.stuck_from, first, message))
    return out


def test_real_set_no_false_pause_and_stuck_found() -> None:
    results = first_pauses()
    assert len(results) >= 60
    progress = [r for r in results if r[1] is None]
    stuck = [r for r in results if r[1] is not None]
    assert len(progress) >= 25 and len(stuck) >= 25
    assert [r for r in progress if r[2] is not None] == []
    assert [r for r in stuck if r[2] is not None and r[2] < r[1]] == []  # never early
    assert [r for r in stuck if r[2] is None] == []  # every stuck one pauses
    within = [r for r in stuck if r[2] is not None and r[2] - r[1] + 1 <= N]
    assert len(within) / len(stuck) >= 0.94
    # The pause says which signal fired and what it saw.
    assert all(("screen_static" in r[3] and "changed_at_site=" in r[3])
               or "action_repeat" in r[3] for r in stuck)
