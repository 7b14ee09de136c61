"""The server invariants I1-I6 (docs/architecture.md), asserted by name on the real system (the
dispatcher's own check of them runs in the unit tests, over its internal state; here only what any
peer sees: status, the in-flight table, and the answers to reports and watchdog questions)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from messages.dispatch import OrphanResend
from messages.replay import Ack, PauseReplay, ResumeReplay
from tests.conftest import Spawn, wait_until
from tests.integration.invariants import (
    assert_server_invariants,
    check_i3_duplicate_report,
    check_i4_cancel_purges,
    check_i5_stale_orphan,
    check_i6_paused_dispatches_nothing,
    snapshot,
)
from tests.integration.probes import hold, ready_agent, report_statuses, reports
from tests.integration.system import System, clicks, workflow

SLOW_WATCHDOG = {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60"}


@pytest.fixture
def system(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> System:
    return System(spawn, lea_env, tmp_path, extra_env=SLOW_WATCHDOG)


def test_i1_i2_hold_at_every_moment_of_concurrent_replays(system: System) -> None:
    """I1 (in flight ⇒ not queued, not counted twice) and I2 (one in flight per replay and
    per session, unique attempts), sampled continuously while three replays run: two on one
    session (the second waits its turn) with a business retry, one on another machine."""
    ready_agent(system, "M1", scenario={"actions": {"s1": {"fail": "target_not_found", "times": 1}},
                                 "default": {"delay_s": 0.3}})
    ready_agent(system, "M2", scenario={"default": {"delay_s": 0.2}})
    a = system.start(workflow(*clicks(4)), "M1", session_id="ward-3")
    b = system.start(workflow(*clicks(2), workflow_id="wf-b"), "M1", session_id="ward-3")
    c = system.start(workflow(*clicks(3), workflow_id="wf-c"), "M2")
    waited: list[bool] = []
    samples = 0

    def all_done() -> bool:
        nonlocal samples
        seen = {rid: assert_server_invariants(system, rid) for rid in (a, b, c)}
        samples += 1
        # A still running now (it never goes back to running) ⇒ it was when B was seen, so
        # B's turn had not come: nothing of B may have been in flight.
        if system.status(a).status == "running":
            waited.append(seen[b].current_action_id is None)
        return all(s.status == "completed" for s in seen.values())

    wait_until(all_done, timeout=60, interval=0.05)
    assert samples > 10 and waited and all(waited), (samples, waited)
    assert system.status(a).counters.get("retries") == 1  # the retry path was taken
    assert report_statuses(system, a, "s1_retry1") == ["accepted"]


def test_i3_a_duplicated_report_does_not_advance_twice(system: System) -> None:
    """I3: a second copy of an accepted report is answered ``duplicate`` and changes
    nothing, while paused and after completion."""
    ready_agent(system, "M1")
    human = {"type": "pause_for_human", "parameters": {"message": "Contrôle"}}
    rid = system.start(workflow(*clicks(2), human, *clicks(1)), "M1")
    system.wait_status(rid, "paused_need_help")
    check_i3_duplicate_report(system, rid, "s0")
    check_i3_duplicate_report(system, rid, "s1")
    system.call("dispatcher", ResumeReplay(replay_id=rid))
    s = system.wait_status(rid, "completed")
    check_i3_duplicate_report(system, rid, "s3")
    assert system.status(rid).completed_actions == s.completed_actions == 4


def test_i4_cancel_purges_in_flight_and_waiting_replays(system: System) -> None:
    """I4: cancel purges at once, for a replay with an action in flight and for one waiting
    its turn on the session; the session is free afterwards (a new replay runs)."""
    agent = ready_agent(system, "M1", scenario={"actions": {"s0": {"delay_s": 2}}})
    a = system.start(workflow(*clicks(3)), "M1", session_id="bed-12")
    b = system.start(workflow(*clicks(2), workflow_id="wf-b"), "M1", session_id="bed-12")
    system.wait_status(a, "running", where=lambda s: s.current_action_id == "s0")
    a_before, _ = snapshot(system, a)
    check_i4_cancel_purges(system, b)
    assert snapshot(system, a)[0] == a_before  # cancelling B left A alone
    check_i4_cancel_purges(system, a)
    assert system.inflight().entries == []
    wait_until(lambda: report_statuses(system, a, "s0") == ["unknown"], timeout=30)
    c = system.start(workflow(*clicks(1), workflow_id="wf-c"), "M1", session_id="bed-12")
    system.wait_status(c, "completed")
    assert [agent.executed(x) for x in ("s0", "s1")] == [2, 0]  # A's s0 and C's s0 only
    for rid in (a, b, c):
        assert_server_invariants(system, rid)


def test_i5_orphan_questions_for_stale_attempts_are_skipped(system: System) -> None:
    """I5: OrphanResend / OrphanGiveUp sent to ``dispatcher`` (as the watchdog would) for an
    attempt that is not the one in flight are skipped: a finished action's attempt, an
    attempt that never was, and an attempt superseded by a resend. The same question for the
    current attempt does resend (so the check can tell)."""
    agent = ready_agent(system, "M1", scenario={"actions": {"s1": {"delay_s": 4}}})
    rid = system.start(workflow(*clicks(3)), "M1")
    # s1 executing: dispatched, and its click granted once s0's loop verdict came (before
    # that its state says awaiting_loop_verdict, and would change under the checks below).
    system.wait_status(rid, "running", where=lambda s: s.current_action_id == "s1"
                       and s.current_action_state is None)
    (s0,) = [r for r in reports(system, rid) if r["action_id"] == "s0"]
    check_i5_stale_orphan(system, rid, "s0", s0["attempt_id"])
    check_i5_stale_orphan(system, rid, "s1", uuid.uuid4().hex)
    before, entries = snapshot(system, rid)
    (entry,) = [e for e in entries if e.replay_id == rid]
    ack = system.call("dispatcher", OrphanResend(action_id="s1", attempt_id=entry.attempt_id,
                                                 age_s=61.0))
    assert isinstance(ack, Ack) and ack.status == "resent", ack
    after, entries = snapshot(system, rid)
    (resent,) = [e for e in entries if e.replay_id == rid]
    assert (resent.action_id, resent.resent_count) == ("s1", 1)
    assert resent.attempt_id == ack.detail["attempt_id"] != entry.attempt_id
    assert after.counters["resent"] == before.counters.get("resent", 0) + 1
    check_i5_stale_orphan(system, rid, "s1", entry.attempt_id)  # the superseded attempt
    system.wait_status(rid, "completed", timeout=30)
    assert agent.executed("s1") == 1
    assert report_statuses(system, rid, "s1") == ["accepted"]  # re-addressed by the agent


def test_i6_a_paused_replay_never_dispatches_even_when_its_turn_comes(system: System) -> None:
    """I6: an operator pauses a replay that waits its turn on the session; when the replay
    ahead completes, the session passes to the paused one, which dispatches nothing until
    resumed."""
    agent = ready_agent(system, "M1", scenario={"actions": {"s0": {"delay_s": 1.5}}})
    a = system.start(workflow(*clicks(2)), "M1", session_id="bloc-2")
    b = system.start(workflow(*clicks(2), workflow_id="wf-b"), "M1", session_id="bloc-2")
    ack = system.call("dispatcher", PauseReplay(replay_id=b, operator="ide-nuit"))
    assert isinstance(ack, Ack) and ack.detail["inflight_action_id"] is None, ack
    system.wait_status(a, "completed", timeout=30)
    check_i6_paused_dispatches_nothing(system, b, for_s=2.0)
    assert system.status(b).counters.get("dispatched", 0) == 0
    system.call("dispatcher", ResumeReplay(replay_id=b, operator="ide-nuit"))
    system.wait_status(b, "completed", timeout=30)
    assert [agent.executed(x) for x in ("s0", "s1")] == [2, 2]
    hold(lambda: system.inflight().entries == [], for_s=0.5)
