"""The server invariants I1-I6 (docs/architecture.md), checked from outside on a running system:
through ``replay.status`` and ``ListInFlight`` only, plus requests any peer could send.

Each failure names its invariant. The static ones are checked on a consistent snapshot
(:func:`assert_server_invariants`); I3, I4, I5 and I6 are behaviours, exercised by the
``check_*`` helpers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from messages.dispatch import InFlight, OrphanGiveUp, OrphanResend, ReportAck
from messages.replay import Ack, CancelReplay, ReplayCancelled, ReplaySummary
from tests.integration.probes import hold, progress, reports, resend_of
from tests.integration.system import System


def snapshot(system: System, replay_id: str) -> tuple[ReplaySummary, list[InFlight]]:
    """Status and the in-flight table as of one moment: the table is read between two
    identical statuses (``updated_at`` moves on every change of the replay)."""
    for _ in range(100):
        before = system.status(replay_id)
        entries = system.inflight().entries
        after = system.status(replay_id)
        if before == after:
            return after, entries
    pytest.fail(f"replay {replay_id} changed during 100 snapshots in a row")


def assert_server_invariants(system: System, replay_id: str) -> ReplaySummary:
    """I1, I2 and I4 on a consistent snapshot; returns the status seen."""
    s, entries = snapshot(system, replay_id)
    mine = [e for e in entries if e.replay_id == replay_id]
    current = s.current_action_id
    # I2: at most one action in flight per replay and per session; attempt ids unique.
    assert len(mine) <= 1, f"I2: {replay_id} has {len(mine)} actions in flight: {mine}"
    session = [e for e in entries if e.session_id == s.session_id]
    assert len(session) <= 1, f"I2: session {s.session_id} has {len(session)} in flight"
    twice = [a for a, n in Counter(e.attempt_id for e in entries).items() if n > 1]
    assert not twice, f"I2: attempt ids in flight twice: {twice}"
    assert (mine[0].action_id if mine else None) == current, (
        f"I2: status says {current!r} in flight, the in-flight table {mine}")
    # I1: the action in flight is not also in the queue, nor counted twice in what is left.
    assert current not in s.queue_head, f"I1: {current} is in flight and queued: {s}"
    in_flight = 1 if current is not None else 0
    left = s.total - s.index
    if s.status == "running":
        assert s.queue_length + in_flight == left, (
            f"I1: {s.queue_length} queued + {in_flight} in flight != {left} steps left")
    elif s.status == "paused_need_help":
        # The step a pause is about may be held aside (resumed as ``_resume``), never doubled.
        assert s.queue_length + in_flight <= left, (
            f"I1: {s.queue_length} queued + {in_flight} in flight > {left} steps left")
    else:
        # I4 (and D4): a finished replay keeps nothing queued and nothing in flight.
        assert (current, s.queue_length, mine) == (None, 0, []), f"I4: {s.status} keeps {s}"
    if s.status == "completed":
        assert s.index == s.total, f"completed at step {s.index}/{s.total}"
    return s


def check_i3_duplicate_report(system: System, replay_id: str, action_id: str) -> None:
    """I3: the accepted report of ``action_id``, sent again, is a ``duplicate`` and moves
    nothing. Call it when the replay is still (paused or finished)."""
    accepted = [r for r in reports(system, replay_id)
                if r["action_id"] == action_id and r["status"] == "accepted"]
    assert len(accepted) == 1, f"I3: {action_id} accepted {len(accepted)} times"
    before, entries = snapshot(system, replay_id)
    ack = system.call("dispatcher", resend_of(accepted[0]))
    assert isinstance(ack, ReportAck), ack
    assert ack.status == "duplicate", f"I3: a second copy of {action_id} was {ack.status}"
    after, entries_after = snapshot(system, replay_id)
    assert progress(after) == progress(before), "I3: a duplicate report moved the replay"
    assert _of(entries_after, replay_id) == _of(entries, replay_id), (
        "I3: a duplicate report changed the in-flight table")


def check_i4_cancel_purges(system: System, replay_id: str) -> ReplaySummary:
    """I4: cancel empties the replay's queue and its in-flight entry, at once."""
    reply = system.call("dispatcher", CancelReplay(replay_id=replay_id, operator="i4"))
    assert isinstance(reply, ReplayCancelled), reply
    s, entries = snapshot(system, replay_id)
    assert s.status == "cancelled", s
    assert [e for e in entries if e.replay_id == replay_id] == [], f"I4: {entries}"
    assert (s.current_action_id, s.queue_length, s.queue_head) == (None, 0, []), f"I4: {s}"
    return s


def check_i5_stale_orphan(system: System, replay_id: str, action_id: str,
                          attempt_id: str) -> None:
    """I5: the watchdog's resend / give-up for an attempt that is not the one in flight is
    skipped, whatever it names, and changes nothing."""
    before, entries = snapshot(system, replay_id)
    for question in (OrphanResend(action_id=action_id, attempt_id=attempt_id, age_s=99.0),
                     OrphanGiveUp(action_id=action_id, attempt_id=attempt_id, age_s=99.0,
                                  resent_count=2)):
        ack = system.call("dispatcher", question)
        assert isinstance(ack, Ack), ack
        assert ack.status == "skipped", f"I5: {type(question).__name__} for a stale " \
                                        f"attempt of {action_id} was {ack.status}: {ack.detail}"
    after, entries_after = snapshot(system, replay_id)
    assert progress(after) == progress(before), "I5: a stale orphan question moved the replay"
    assert _of(entries_after, replay_id) == _of(entries, replay_id), (
        "I5: a stale orphan question changed the in-flight table")


def check_i6_paused_dispatches_nothing(system: System, replay_id: str, for_s: float,
                                       also: Callable[[], object] | None = None
                                       ) -> ReplaySummary:
    """I6: for ``for_s`` seconds the paused replay stays paused and dispatches nothing (an
    action that was in flight at the pause may finish: D8); ``also`` must hold meanwhile."""
    start = system.status(replay_id)
    assert start.status == "paused_need_help", start
    dispatched = start.counters.get("dispatched", 0)

    def still() -> bool:
        s = assert_server_invariants(system, replay_id)
        assert s.status == "paused_need_help", f"I6: {replay_id} left the pause: {s}"
        assert s.counters.get("dispatched", 0) == dispatched, (
            f"I6: paused {replay_id} dispatched: {s.counters}")
        assert s.current_action_id in (None, start.current_action_id), f"I6: {s}"
        return also is None or bool(also())

    hold(still, for_s)
    return system.status(replay_id)


def counters(s: ReplaySummary, *names: str) -> dict[str, int]:
    """Some of a replay's counters, 0 when absent."""
    return {n: s.counters.get(n, 0) for n in names}


def _of(entries: list[InFlight], replay_id: str) -> list[InFlight]:
    return [e for e in entries if e.replay_id == replay_id]
