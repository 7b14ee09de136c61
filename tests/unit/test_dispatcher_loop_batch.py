"""The dispatcher's loop consultations in batches: one in flight, the rest gathered."""

from __future__ import annotations

from typing import Any

from actors.dispatcher.loop_batch import LoopBatcher
from actors.dispatcher.machine.decision import Consult
from messages.base import Message
from messages.codec import Envelope
from messages.control import ErrorReply
from messages.loop import MAX_OBSERVE_BATCH, LoopVerdict, LoopVerdicts, ObserveBatch
from tests.unit.test_loop_detector import step
from transport.client import Callback, CallFailed


class Calls:
    """Records the batches sent; the test answers them."""

    def __init__(self) -> None:
        self.sent: list[tuple[ObserveBatch, Callback, float]] = []
        self.answers: list[tuple[str, Message | None, str | None]] = []

    def call(self, service: str, message: Message, callback: Callback, timeout: float) -> None:
        assert service == "loop_detector" and isinstance(message, ObserveBatch)
        self.sent.append((message, callback, timeout))

    def answered(self, consult: Consult, answer: Message | None, why: str | None) -> None:
        self.answers.append((consult.token, answer, why))

    def reply(self, k: int, body: Message | None, error: CallFailed | None = None) -> None:
        self.sent[k][1](None if body is None else Envelope("id", body), error)


def consult(i: int, **fields: Any) -> Consult:
    return Consult("loop_detector", f"r{i}", f"t{i}", step(i, **fields), 2.0)


def ids(batch: ObserveBatch) -> list[str]:
    return [s.action_id for s in batch.steps]


def test_the_first_step_goes_at_once_and_the_next_ones_together() -> None:
    c = Calls()
    b = LoopBatcher(c.call, c.answered)
    b.add(consult(0))
    assert [ids(m) for m, _cb, _t in c.sent] == [["a0"]]
    for i in (1, 2, 3):
        b.add(consult(i))
    assert len(c.sent) == 1 and len(b) == 4  # one batch in flight at a time
    no = LoopVerdict(detected=False)
    c.reply(0, LoopVerdicts(verdicts=[no], problems=[None]))
    assert c.answers == [("t0", no, None)]
    assert ids(c.sent[1][0]) == ["a1", "a2", "a3"]
    loop = LoopVerdict(detected=True, reason="x", signal="action_repeat")
    c.reply(1, LoopVerdicts(verdicts=[no, None, loop], problems=[None, "bad image", None]))
    assert c.answers[1:] == [("t1", no, None), ("t2", None, "bad image"), ("t3", loop, None)]
    assert len(b) == 0 and len(c.sent) == 2


def test_no_answer_or_a_wrong_one_leaves_every_step_of_the_batch_unanswered() -> None:
    c = Calls()
    b = LoopBatcher(c.call, c.answered)
    b.add(consult(0))
    b.add(consult(1))
    c.reply(0, None, CallFailed("timeout", "no reply"))
    assert c.answers == [("t0", None, "timeout: no reply")]
    c.reply(1, LoopVerdicts(verdicts=[], problems=[]))  # not one per step
    assert c.answers[1][1] is None and "unexpected" in str(c.answers[1][2])
    b.add(consult(2))
    c.reply(2, ErrorReply(code="unsupported_type", message="?"))
    assert c.answers[2] == ("t2", None, "unsupported_type: ?")


def test_a_batch_is_bounded_in_steps_and_screenshot_bytes() -> None:
    c = Calls()
    b = LoopBatcher(c.call, c.answered)
    b.add(consult(0))
    for i in range(1, MAX_OBSERVE_BATCH + 2):
        b.add(consult(i))
    c.reply(0, LoopVerdicts(verdicts=[None], problems=["x"]))
    assert len(c.sent[1][0].steps) == MAX_OBSERVE_BATCH
    big = b"\xff\xd8\xff" + b"\0" * (3 * 1024 * 1024)
    c2 = Calls()
    b2 = LoopBatcher(c2.call, c2.answered)
    b2.add(consult(0))
    b2.add(consult(1, shot=big))
    b2.add(consult(2, shot=big))  # 6 MiB together: over the 4 MiB a batch may carry
    c2.reply(0, LoopVerdicts(verdicts=[None], problems=["x"]))
    assert ids(c2.sent[1][0]) == ["a1"]


def test_a_step_added_while_answers_are_handled_is_not_sent_twice() -> None:
    c = Calls()
    b: LoopBatcher

    def answered(cons: Consult, answer: Message | None, why: str | None) -> None:
        c.answered(cons, answer, why)
        if cons.token == "t0":
            b.add(consult(9))  # applying a verdict may well apply another report

    b = LoopBatcher(c.call, answered)
    b.add(consult(0))
    b.add(consult(1))
    c.reply(0, LoopVerdicts(verdicts=[None], problems=["x"]))
    # Nothing was in flight when a9 came: a1 and a9 went together, and only once.
    assert [ids(m) for m, _cb, _t in c.sent] == [["a0"], ["a1", "a9"]]
