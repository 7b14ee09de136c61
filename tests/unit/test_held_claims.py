"""Claims held until the loop verdict they wait for (actors/dispatcher/held_claims.py), on the
dispatcher's core."""

from __future__ import annotations

from actors.dispatcher.held_claims import HeldClaims
from actors.dispatcher.machine.state import DispatcherConfig
from messages.base import Message
from messages.dispatch import ClaimAttempt, ClaimReply
from messages.loop import LoopVerdict
from tests.unit.test_dispatcher_consult import answer
from tests.unit.test_dispatcher_core import H, act, wf


def _claim(h: H, rid: str) -> ClaimAttempt:
    e = h.cur(rid)
    return ClaimAttempt(replay_id=rid, machine_id="m1", action_id=e.action.action_id,
                        attempt_id=e.attempt_id)


def _decide(h: H) -> object:
    return lambda claim, sender: h.core.claim(claim, sender, h.now).reply


def test_a_claim_waiting_for_a_verdict_is_held_and_granted_when_it_comes() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf("s1", "s2", "s3"))
    h.report(rid)
    held: HeldClaims[str] = HeldClaims(limit=4)
    sent: list[tuple[str, Message]] = []
    claim = _claim(h, rid)
    assert held.hold("req1", claim, "m1", h.core.claim(claim, "m1", h.now).reply)
    held.answer(_decide(h), lambda req, reply: sent.append((req, reply)))  # type: ignore[arg-type]
    assert sent == [] and len(held) == 1  # the verdict is not in: still held
    answer(h, rid, LoopVerdict(detected=False))
    held.answer(_decide(h), lambda req, reply: sent.append((req, reply)))  # type: ignore[arg-type]
    assert sent == [("req1", ClaimReply(granted=True))] and len(held) == 0
    assert h.cur(rid).claimed


def test_a_verdict_that_pauses_refuses_the_held_claim() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf("s1", "s2", "s3"))
    h.report(rid)
    held: HeldClaims[str] = HeldClaims(limit=4)
    claim = _claim(h, rid)
    assert held.hold("req1", claim, "m1", h.core.claim(claim, "m1", h.now).reply)
    answer(h, rid, LoopVerdict(detected=True, signal="screen_static", reason="static"))
    assert h.status(rid).status == "paused_need_help"
    sent: list[tuple[str, Message]] = []
    held.answer(_decide(h), lambda req, reply: sent.append((req, reply)))  # type: ignore[arg-type]
    ((req, reply),) = sent
    assert req == "req1" and isinstance(reply, ClaimReply) and not reply.granted


def test_only_a_not_yet_is_held_and_never_more_than_the_limit() -> None:
    h = H(DispatcherConfig(loop_detector=True))
    rid, _ = h.start(wf("s1", "s2", act("s3")))
    claim = _claim(h, rid)
    held: HeldClaims[str] = HeldClaims(limit=1)
    granted = h.core.claim(claim, "m1", h.now).reply
    assert granted == ClaimReply(granted=True)  # no verdict pending: answered at once
    assert not held.hold("r0", claim, "m1", granted)
    h.report(rid)
    claim = _claim(h, rid)
    pending = h.core.claim(claim, "m1", h.now).reply
    assert held.hold("r1", claim, "m1", pending)
    assert not held.hold("r2", claim, "m1", pending) and len(held) == 1
