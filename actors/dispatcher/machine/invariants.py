"""Invariants I1-I6 (docs/architecture.md, "The contract's named rules") and of our ordering,
checked over the core's state.

Explicit ``raise`` rather than ``assert`` so that ``python -O`` does not silence them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

from actors.dispatcher.machine.decision import Decision, SendToAgent
from actors.dispatcher.machine.state import PAUSED, ReplayState


def _fail(name: str, text: str) -> NoReturn:
    raise AssertionError(f"{name}: {text}")


def check_invariants(replays: Mapping[str, ReplayState], by_attempt: Mapping[str, str],
                     decision: Decision | None = None) -> None:
    """Raise AssertionError naming the first broken invariant."""
    attempts: dict[str, str] = {}
    sessions: dict[str, str] = {}
    owners: dict[str, ReplayState] = {}
    for r in replays.values():
        if r.active and (r.session_id not in owners or r.seq < owners[r.session_id].seq):
            owners[r.session_id] = r
    for r in replays.values():
        _check_replay(r)
        e = r.inflight
        if e is None:
            continue
        aid = e.action.action_id
        if e.attempt_id in attempts:
            _fail("I2", f"attempt {e.attempt_id} in flight twice")
        attempts[e.attempt_id] = r.replay_id
        if r.session_id in sessions:
            _fail("I2", f"session {r.session_id} has two actions in flight "
                  f"({sessions[r.session_id]}, {r.replay_id})")
        sessions[r.session_id] = r.replay_id
        if owners.get(r.session_id) is not r:
            _fail("order", f"{r.replay_id} has {aid} in flight but it is not its session's turn")
        if by_attempt.get(e.attempt_id) != r.replay_id:
            _fail("I5", f"attempt {e.attempt_id} of {aid} missing from the attempt index")
    stale = set(by_attempt) - set(attempts)
    if stale:
        _fail("I5", f"attempt index holds attempts no longer in flight: {sorted(stale)}")
    if decision is not None:
        _check_decision(replays, decision)


def _check_replay(r: ReplayState) -> None:
    e = r.inflight
    queue = r.queue_ids()
    if not r.active and (e is not None or queue):
        _fail("I4", f"{r.status} replay {r.replay_id} keeps {len(queue)} queued / "
              f"{'an' if e else 'no'} action in flight")
    if (r.status == PAUSED) != (r.pause is not None):
        _fail("state", f"replay {r.replay_id} is {r.status} with pause={r.pause!r}")
    if len(set(queue)) != len(queue):
        _fail("I2", f"replay {r.replay_id} queues an action id twice")
    reused = set(queue) & set(r.resolved)
    if reused:
        _fail("I3", f"replay {r.replay_id} queues already resolved ids {sorted(reused)}")
    if not 0 <= r.index <= r.total or r.completed_actions > r.index:
        _fail("state", f"replay {r.replay_id} index {r.index}/{r.total}, "
              f"completed {r.completed_actions}")
    if r.status == "completed" and r.index != r.total:
        _fail("state", f"replay {r.replay_id} completed at step {r.index}/{r.total}")
    waiting = r.awaiting.action if r.awaiting is not None else None
    held = {a.action_id for a in (e.action if e else None, waiting) if a is not None}
    stray = set(r.supersedes) - set(queue) - held
    if stray:
        _fail("state", f"replay {r.replay_id} keeps supersedes of actions neither queued nor"
              f" in flight: {sorted(stray)}")
    if waiting is not None and (waiting.action_id in queue or e is not None):
        _fail("I1", f"{waiting.action_id} of {r.replay_id} awaits its consultation while "
              "queued or with another action in flight")
    if e is None:
        return
    aid = e.action.action_id
    if aid in queue:
        _fail("I1", f"{aid} of {r.replay_id} is in flight and still queued")
    if aid in r.resolved:
        _fail("I3", f"{aid} of {r.replay_id} was already resolved and is in flight again")
    if r.status == PAUSED and r.pause is not None and e.first_dispatched_at > r.pause.at:
        _fail("I6", f"{aid} of paused {r.replay_id} was dispatched after the pause")


def _check_decision(replays: Mapping[str, ReplayState], decision: Decision) -> None:
    for effect in decision.effects:
        if not isinstance(effect, SendToAgent):
            continue
        msg = effect.message
        r = replays.get(msg.replay_id)
        if r is None or r.inflight is None:
            _fail("I4", f"sent {msg.action.action_id} for a replay with nothing in flight")
        if r.inflight.action.action_id != msg.action.action_id:
            _fail("I1", f"sent {msg.action.action_id}, but {r.replay_id} waits for "
                  f"{r.inflight.action.action_id}")
        if r.status == PAUSED and msg.dispatch_meta.resent_count == 0:
            _fail("I6", f"paused {r.replay_id} dispatched a new action {msg.action.action_id}")
        if effect.machine_id != r.machine_id:
            _fail("security", f"{msg.action.action_id} sent to {effect.machine_id}, "
                  f"not {r.machine_id}")
