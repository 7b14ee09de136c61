"""Claims held until the loop verdict they wait for: answered the turn it comes.

A step is dispatched at once after its predecessor's report, and the predecessor's loop
verdict is asked at the same moment (machine/consult_inputs.py): the agent's claim of an input
action often arrives a fraction of a round trip before that verdict. Answering it "not yet" costs
the agent a wait and a second claim; holding the request costs one of the dispatcher's
worker connections (a Majordomo worker serves one request at a time per connection,
actors/base.py), until the verdict or its timeout. So a claim that would be told "not yet"
is held, at most :attr:`HeldClaims.limit` of them at once (the other connections stay for
reports and people), and answered by the same rule (agent_inputs.claim) whenever an input
may have changed its answer: granted once the verdict is in, refused if it paused the
replay. Beyond the limit, the "not yet" of before. Nothing here is durable: a claim never
is (agent_inputs.claim), and a held one left unanswered by a stop is asked again by the
agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from actors.dispatcher.machine.consult_inputs import VERDICT_PENDING
from messages.base import Message
from messages.dispatch import ClaimAttempt, ClaimReply

R = TypeVar("R")
"""What the shell needs to answer a held request."""
Claim = Callable[[ClaimAttempt, str], Message]
"""The core's answer to a claim now (``(claim, sender machine)``)."""


def pending(reply: Message) -> bool:
    """Whether ``reply`` is the "not yet" of a pending loop verdict."""
    return isinstance(reply, ClaimReply) and reply.reason == VERDICT_PENDING


@dataclass(frozen=True, slots=True)
class Held(Generic[R]):
    request: R
    claim: ClaimAttempt
    sender: str


class HeldClaims(Generic[R]):
    """The claims held (``R``: what the shell needs to answer one)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: list[Held[R]] = []

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, request: R, claim: ClaimAttempt, sender: str, reply: Message) -> bool:
        """Hold ``request`` if its ``reply`` is "not yet" and there is room (True)."""
        if not pending(reply) or len(self._held) >= self.limit:
            return False
        self._held.append(Held(request, claim, sender))
        return True

    def answer(self, decide: Claim, send: Callable[[R, Message], None]) -> None:
        """Answer every held claim whose answer is no longer "not yet"."""
        if not self._held:
            return
        still: list[Held[R]] = []
        for h in self._held:
            reply = decide(h.claim, h.sender)
            if pending(reply):
                still.append(h)
            else:
                send(h.request, reply)
        self._held = still
