"""The loop detector's shell in-process: which requests are answered on the loop, which on
the worker thread, and that a replay's requests still change its rings in order."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from actors.base import Deferred, Incoming
from actors.loop_detector.config import LoopConfig
from actors.loop_detector.pixel import Frame, PixelEmbedder
from actors.loop_detector.process import LoopDetectorActor
from messages.base import Message
from messages.loop import ForgetReplay, LoopVerdict, LoopVerdicts, ObserveBatch
from messages.replay import Ack
from runtime.settings import Settings
from tests.conftest import free_port
from tests.unit.test_loop_detector import screen, step

LOCAL = Incoming("req", b"client")  # a local peer: trusted


class Gate:
    """The pixel embedder, held at a gate: the worker thread waits there (with the core's
    lock) as it would while decoding a large PNG."""

    name = "pixel"

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self._pixel = PixelEmbedder()

    def frame(self, data: bytes) -> Frame:
        self.entered.set()
        assert self.open.wait(30), "the test never opened the gate"
        return self._pixel.frame(data)


@pytest.fixture
def actor(tmp_path: Path) -> Iterator[LoopDetectorActor]:
    settings = Settings(mdp_endpoint=f"tcp://127.0.0.1:{free_port()}",
                        bus_in_endpoint=f"tcp://127.0.0.1:{free_port()}",
                        bus_out_endpoint=f"tcp://127.0.0.1:{free_port()}",
                        data_dir=tmp_path / "var")
    a = LoopDetectorActor(settings, LoopConfig(embedder="pixel", max_replays=2))
    yield a
    a.close()


def deferred_replies(a: LoopDetectorActor, count: int) -> list[Message]:
    """The next ``count`` answers of the worker thread, in the order it gave them."""
    out = []
    for _ in range(count):
        done = a.deferred.wait(30)
        assert done.failure is None, done.failure
        out.append(done.reply)
    return out


def test_steps_without_a_screenshot_are_answered_on_the_loop(
        actor: LoopDetectorActor) -> None:
    waits = [step(i, action_type="wait", target=None) for i in range(3)]
    assert [actor.on_observe(s, LOCAL) for s in waits] == [LoopVerdict(detected=False)] * 3
    assert actor.core.replays == 0  # a replay of waits keeps nothing
    clicks = [step(i, target={"by_text": "Valider"}) for i in range(3)]
    out = [actor.on_observe(s, LOCAL) for s in clicks]
    assert [isinstance(v, LoopVerdict) and v.detected for v in out] == [False, False, True]
    forgotten = actor.on_forget(ForgetReplay(replay_id="r1"), LOCAL)
    assert isinstance(forgotten, Ack) and forgotten.status == "forgotten"
    assert not actor.deferred.started  # no hop to the worker thread was needed


def test_a_replay_waiting_on_the_worker_keeps_its_order(actor: LoopDetectorActor) -> None:
    gate = Gate()
    actor.core.pixel = gate
    same = screen("Dupont")
    first = actor.on_observe(step(0, same), LOCAL)  # has a screenshot: to the worker
    assert isinstance(first, Deferred)
    assert gate.entered.wait(30)
    # The worker is busy with r1 (and holds the core): r1's next step and its forget wait
    # behind it, rather than overtake it on the loop; the loop is not blocked meanwhile.
    second = actor.on_observe(step(1, None, target={"by_text": "b0"}), LOCAL)
    forget = actor.on_forget(ForgetReplay(replay_id="r1"), LOCAL)
    assert isinstance(second, Deferred) and isinstance(forget, Deferred)
    gate.open.set()
    replies = deferred_replies(actor, 3)
    assert replies[:2] == [LoopVerdict(detected=False)] * 2
    assert isinstance(replies[2], Ack) and replies[2].status == "forgotten"
    assert actor._queued == {} and actor.core.replays == 0
    # Nothing of r1 waits any more: back to the loop.
    again = actor.on_forget(ForgetReplay(replay_id="r1"), LOCAL)
    assert isinstance(again, Ack) and again.status == "unknown"


def test_evictions_are_logged_once_a_second_with_their_count(
        actor: LoopDetectorActor) -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING", format="{message}")
    try:
        for r in range(5):  # max_replays=2: three forgotten
            actor.on_observe(step(0, replay=f"r{r}"), LOCAL)
        actor._evictions(0.0)
        actor._evictions(1.0)  # nothing more forgotten: nothing logged
    finally:
        logger.remove(sink)
    assert actor.core.evicted == 3 and actor.core.last_evicted == "r2"
    assert len(lines) == 1 and "forgot 3 " in lines[0] and "last r2" in lines[0]


def test_a_batch_is_judged_step_by_step_in_order(actor: LoopDetectorActor) -> None:
    """Three identical clicks in one batch: the third loops, as three requests would; a
    screenshot that does not decode leaves its step unjudged, the others are judged."""
    clicks = [step(i, target={"by_text": "Valider"}) for i in range(3)]
    out = actor.on_observe_batch(ObserveBatch(steps=clicks), LOCAL)
    assert isinstance(out, LoopVerdicts) and out.problems == [None] * 3
    assert [v is not None and v.detected for v in out.verdicts] == [False, False, True]
    bad = step(0, b"\xff\xd8\xff not a jpeg", replay="r2")
    deferred = actor.on_observe_batch(
        ObserveBatch(steps=[bad, step(1, replay="r2", action_type="wait", target=None)]),
        LOCAL)
    assert isinstance(deferred, Deferred)  # a screenshot: the whole batch on the worker
    (reply,) = deferred_replies(actor, 1)
    assert isinstance(reply, LoopVerdicts)
    assert reply.verdicts == [None, LoopVerdict(detected=False)]
    assert reply.problems[0] and reply.problems[1] is None
    assert actor._queued == {}
