"""The loop detector's consultations, sent in batches: one in flight, the rest gathered.

Every accepted report is shown to the loop detector (machine/consult_inputs.py). One request per
step made the detector, a Majordomo worker that serves one request at a time, pay a broker
round trip per step, and capped the whole tree near its rate (bench/throughput.py). Here the
first step goes at once; while its batch is in flight the steps applied meanwhile wait, and
go together when the answer comes: no delay when idle, batches as large as the load.

Each consultation keeps its own answer: the verdict at its place in the reply, or None and
why (no reply in time, an error, a reply of the wrong length). Steps go in the order they
were added, and batches one after the other, so the detector sees a replay's steps in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from actors.dispatcher.machine.decision import Consult
from messages.base import Message
from messages.codec import Envelope
from messages.control import ErrorReply
from messages.loop import MAX_OBSERVE_BATCH, LoopVerdicts, ObserveBatch, ObserveStep
from transport.client import Callback, CallFailed

MAX_BATCH_BYTES = 4 * 1024 * 1024
"""Screenshots in one batch at most (a message is limited to 16 MiB)."""

Call = Callable[[str, Message, Callback, float], object]
"""A non-blocking call: ``(service, message, callback, timeout_s)``."""
Answered = Callable[[Consult, Message | None, str | None], None]
"""What to do with one consultation's answer (or None, and why not)."""


class LoopBatcher:
    """Sends :class:`Consult` effects of the loop detector as :class:`ObserveBatch` es."""

    def __init__(self, call: Call, answered: Answered, service: str = "loop_detector") -> None:
        self._call = call
        self._answered = answered
        self.service = service
        self._waiting: deque[Consult] = deque()
        self._in_flight: list[Consult] | None = None

    def add(self, consult: Consult) -> None:
        """Send ``consult`` now if no batch is in flight, else with the next one."""
        if not isinstance(consult.message, ObserveStep):
            raise TypeError(f"not a loop observation: {consult.message!r}")
        self._waiting.append(consult)
        if self._in_flight is None:
            self._send()

    def __len__(self) -> int:
        """Consultations not answered yet (in flight or waiting)."""
        return len(self._waiting) + len(self._in_flight or ())

    def _send(self) -> None:
        batch: list[Consult] = []
        size = 0
        while self._waiting and len(batch) < MAX_OBSERVE_BATCH:
            step = self._waiting[0].message
            shot = len(step.screenshot_after or b"") if isinstance(step, ObserveStep) else 0
            if batch and size + shot > MAX_BATCH_BYTES:
                break
            batch.append(self._waiting.popleft())
            size += shot
        if not batch:
            return
        self._in_flight = batch
        steps = [c.message for c in batch if isinstance(c.message, ObserveStep)]
        timeout = max(c.timeout_s for c in batch)
        self._call(self.service, ObserveBatch(steps=steps),
                   lambda reply, error: self._reply(batch, reply, error), timeout)

    def _reply(self, batch: list[Consult], reply: Envelope[Message] | None,
               error: CallFailed | None) -> None:
        self._in_flight = None
        answer = reply.body if reply is not None else None
        if isinstance(answer, LoopVerdicts) and len(answer.verdicts) == len(batch) == len(
                answer.problems):
            for consult, verdict, problem in zip(batch, answer.verdicts, answer.problems,
                                                 strict=True):
                self._answered(consult, verdict, problem)
        else:
            why = (str(error) if error is not None
                   else f"{answer.code}: {answer.message}" if isinstance(answer, ErrorReply)
                   else f"unexpected answer {type(answer).__name__} to {len(batch)} step(s)")
            for consult in batch:
                self._answered(consult, None, why)
        if self._in_flight is None:  # (an answer may have added and sent a step already)
            self._send()  # what came meanwhile, at once
