"""Signal A on 1920x1080 screens from the evaluation generator (bench/screens.py).

A few sequences only (the full evaluation is ``python bench/loop_eval.py``): progress is
never a loop, and a stuck screen is one although its clock, caret and spinner go on.
"""

from __future__ import annotations

import random

import pytest

from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore
from actors.loop_detector.pixel import PixelEmbedder
from bench.screens import Ambient, Encoding, encode, sequence_images
from messages.loop import LoopVerdict, ObserveStep

N = LoopConfig().screen_static_n


def run(frames: list[bytes]) -> list[LoopVerdict]:
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), PixelEmbedder())
    return [core.observe(ObserveStep(
        replay_id="r", action_id=f"s{i}", base_action_id=f"s{i}", action_type="click",
        target={"by_text": f"bouton {i}"}, success=True, screenshot_after=data)).verdict
        for i, data in enumerate(frames)]


def everything_ticks(rng: random.Random) -> Ambient:
    """A clock with seconds, a blinking caret, a spinner and a counter, all at once."""
    return Ambient(clock=True, seconds=rng.randrange(86400), caret=True, spinner=True,
                   badge=3)


@pytest.mark.parametrize(("seed", "encoding"), [(1, "png"), (2, "jpeg"), (3, "jpeg")])
def test_progress_is_not_a_loop(seed: int, encoding: Encoding) -> None:
    rng = random.Random(seed)
    images, steps = sequence_images(rng, 10, None, everything_ticks(rng))
    verdicts = run([encode(im, encoding, rng) for im in images])
    assert not any(v.detected for v in verdicts), steps


@pytest.mark.parametrize(("seed", "encoding", "stuck_from"),
                         [(4, "png", 0), (5, "jpeg", 2), (6, "jpeg", 4)])
def test_stuck_screen_with_ticking_clock_is_a_loop(seed: int, encoding: Encoding,
                                                   stuck_from: int) -> None:
    rng = random.Random(seed)
    # From the start everything is new: each ticking thing's first change counts as
    # progress once (bench/loop_eval.py prints how many captures a pause takes).
    images, steps = sequence_images(rng, stuck_from + 16, stuck_from, everything_ticks(rng))
    verdicts = run([encode(im, encoding, rng) for im in images])
    detected = [i for i, v in enumerate(verdicts) if v.detected]
    assert detected, steps
    first = detected[0]
    assert first >= stuck_from + N - 1  # never before N frozen captures exist
    assert verdicts[first].signal == "screen_static"
    assert verdicts[first].evidence["ignored_tiles"] > 0  # the clock and co. were seen
