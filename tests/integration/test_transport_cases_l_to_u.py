"""The transport contract's edge cases l to u (docs/architecture.md, "The contract's named
rules") on the real system: `python run.py` (broker + actors under the supervisor), simulated
agents as processes, the CLI as a person runs it.

Our transport is ZeroMQ (MDP/0.2), not HTTP polling / SSE: where a case names HTTP
machinery, the test exercises its ZeroMQ equivalent and says so. Exactly-once is proven by
counting lines of the agent's effects log; what the dispatcher did with each report, by its
reports log. Invariants I1-I6 are checked by name (tests/integration/invariants.py).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from messages.dispatch import ActionReport, ReportAck
from tests.conftest import Spawn, wait_until
from tests.integration.invariants import (
    assert_server_invariants,
    check_i3_duplicate_report,
    check_i6_paused_dispatches_nothing,
    counters,
    snapshot,
)
from tests.integration.probes import (
    Tap,
    cli,
    hold,
    mmi,
    progress,
    ready_agent,
    refused_call,
    report_statuses,
    reports,
)
from tests.integration.system import System, clicks, workflow

# A watchdog too slow to act within a test: what happens is the system's doing, not its.
SLOW_WATCHDOG = {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60"}
# Liveness claims (cases r, t) on a shared, noisy machine: 250 ms heartbeats, 5 missed drop.
PATIENT = {"LEA_HEARTBEAT_LIVENESS": "5"}
PAUSED = "paused_need_help"
Make = Callable[..., System]


def wait_ms(ms: int) -> dict[str, object]:
    return {"type": "wait", "parameters": {"duration_ms": ms}}


def liveness_period(system: System) -> float:
    """Seconds after which the broker drops a silent worker (interval x liveness)."""
    return (int(system.env["LEA_HEARTBEAT_INTERVAL_MS"]) / 1000
            * int(system.env["LEA_HEARTBEAT_LIVENESS"]))


def child_pid(system: System, name: str) -> int | None:
    """The child's pid, or None while the supervisor restarts it."""
    try:
        return system.child_pid(name)
    except LookupError:
        return None


@pytest.fixture
def make(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> Make:
    def _make(**extra_env: str) -> System:
        return System(spawn, lea_env, tmp_path, extra_env=extra_env)
    return _make


def test_case_l_operator_pause_while_a_long_wait_executes(make: Make) -> None:
    """l: a pause while an action is in flight applies from the next step (D8). The wait is
    not cancelled: it completes, its report is applied, nothing further is dispatched (I6)
    however long the pause lasts; resume goes on with the next step."""
    system = make(**SLOW_WATCHDOG)
    agent = ready_agent(system, "M1")
    rid = system.start(workflow(wait_ms(6000), *clicks(2)), "M1")
    system.wait_status(rid, "running", where=lambda s: s.current_action_id == "s0")
    out = cli(system, "replay", "pause", rid, "--operator", "alice", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["detail"]["inflight_action_id"] == "s0"
    s = assert_server_invariants(system, rid)
    assert (s.status, s.pause_reason, s.current_action_id) == (PAUSED, "operator", "s0")
    assert "alice" in (s.pause_message or "")
    s = system.wait_status(rid, PAUSED, where=lambda s: s.current_action_id is None, timeout=30)
    assert s.completed_actions == 1 and report_statuses(system, rid, "s0") == ["accepted"]
    check_i6_paused_dispatches_nothing(system, rid, for_s=2.0)
    check_i3_duplicate_report(system, rid, "s0")
    assert agent.effects() == []
    shown = cli(system, "replay", "status", rid)
    assert shown.returncode == 0 and "paused: operator" in shown.stdout, shown
    out = cli(system, "replay", "resume", rid, "--operator", "alice")
    assert out.returncode == 0 and "resumed" in out.stdout, out
    s = system.wait_status(rid, "completed", timeout=30)
    assert (s.completed_actions, agent.executed("s1"), agent.executed("s2")) == (3, 1, 1)
    assert_server_invariants(system, rid)


def test_case_m_cancel_while_in_flight_late_report_is_unknown(make: Make) -> None:
    """m: cancel while the agent executes purges the replay's queue and in-flight entry at
    once (I4); the late report is answered ``unknown`` (recorded, no error), and nothing
    further is dispatched."""
    system = make()
    agent = ready_agent(system, "M1")
    rid = system.start(workflow(wait_ms(4000), *clicks(2)), "M1")
    system.wait_status(rid, "running", where=lambda s: s.current_action_id == "s0")
    out = cli(system, "replay", "cancel", rid, "--operator", "bob")
    assert out.returncode == 0 and f"cancelled {rid}" in out.stdout, out
    s = assert_server_invariants(system, rid)  # I4: cancelled keeps nothing
    assert s.status == "cancelled"
    wait_until(lambda: report_statuses(system, rid, "s0") == ["unknown"], timeout=30)
    hold(lambda: progress(assert_server_invariants(system, rid)) == progress(s), for_s=1.5)
    assert counters(s, "dispatched") == {"dispatched": 1} and agent.effects() == []


def test_case_n_max_resends_critical_pauses_wait_continues(make: Make) -> None:
    """n: no agent answers, the watchdog resends MAX_RESENDS (2) times then gives up (D2):
    a lost click pauses its replay (orphan_max_resends) with nothing left in flight; a lost
    wait is logged and its replay goes on, and completes once Léa is back. Two machines, so
    each session has one give-up only (two would be the dead-client signal, case h)."""
    system = make()
    wait_rid = system.start(workflow(wait_ms(100), *clicks(1)), "M-wait")
    click_rid = system.start(workflow(*clicks(2)), "M-click")
    w = system.wait_status(wait_rid, "running", timeout=60,
                           where=lambda s: s.counters.get("abandoned") == 1)
    agent = system.agent("M-wait")  # at once: a second give-up would be a dead client
    assert (w.index, w.pause_reason) == (1, None)
    assert counters(w, "resent", "abandoned") == {"resent": 2, "abandoned": 1}
    c = system.wait_status(click_rid, PAUSED, timeout=60)
    assert c.pause_reason == "orphan_max_resends" and c.current_action_id is None
    assert counters(c, "dispatched", "resent", "abandoned") == {
        "dispatched": 1, "resent": 2, "abandoned": 1}
    assert_server_invariants(system, click_rid)
    w = system.wait_status(wait_rid, "completed", timeout=60)
    assert agent.executed("s1") == 1 and w.completed_actions == 1  # the wait was lost
    # Late reports of the abandoned wait (re-delivered once Léa came back) are never applied.
    assert set(report_statuses(system, wait_rid, "s0")) <= {"stale"}
    check_i6_paused_dispatches_nothing(system, click_rid, for_s=1.0)


def test_case_o_pause_for_human_is_never_put_in_flight(make: Make) -> None:
    """o: we have no server-side actions (extract_text, t2a_decision). The nearest thing is
    pause_for_human, resolved by the dispatcher itself: it never enters the in-flight table
    and never reaches the agent, supervised (a pause with checks) or autonomous (skipped)."""
    system = make()
    agent = ready_agent(system, "M1")
    human = {"type": "pause_for_human", "parameters": {
        "message": "Vérifiez l'ordonnance",
        "safety_checks": [{"id": "rx", "label": "Ordonnance vérifiée"}]}}
    rid = system.start(workflow(*clicks(1), human, *clicks(1)), "M1")
    s = system.wait_status(rid, PAUSED)
    assert (s.pause_reason, s.current_action_id) == ("user_request", None)
    assert [c.id for c in s.safety_checks] == ["rx"]
    check_i6_paused_dispatches_nothing(system, rid, for_s=1.0)
    out = cli(system, "replay", "resume", rid, "--ack", "rx", "--operator", "dr-martin")
    assert out.returncode == 0, out
    s = system.wait_status(rid, "completed")
    auto = system.start(workflow(*clicks(1), {"type": "pause_for_human"}, *clicks(1),
                                 workflow_id="wf-auto"), "M1", mode="autonomous")
    a = system.wait_status(auto, "completed")
    for summary, replay_id in ((s, rid), (a, auto)):
        assert summary.completed_actions == 3
        assert counters(summary, "dispatched") == {"dispatched": 2}
        assert [r["action_id"] for r in reports(system, replay_id)] == ["s0", "s2"]
    assert counters(a, "skipped") == {"skipped": 1}
    assert agent.executed("s1") == 0 and agent.executed("s2") == 2


def test_case_p_completion_purges_in_flight_leftovers(make: Make) -> None:
    """p: the last step outlives the orphan timeout, so the watchdog resends it while it
    executes; once its report lands the replay completes and nothing of it stays in flight
    (D4), so nothing is resent or executed again afterwards."""
    system = make()
    agent = ready_agent(system, "M1", scenario={"actions": {"s2": {"delay_s": 4.5}}})
    rid = system.start(workflow(*clicks(3)), "M1")
    s = system.wait_status(rid, "completed", timeout=60)
    assert s.counters.get("resent", 0) >= 1, s.counters  # the leftover situation happened
    assert_server_invariants(system, rid)
    window = float(system.env["RPA_WATCHDOG_ORPHAN_TIMEOUT_S"]) + 1.0

    def nothing_left() -> bool:
        after = assert_server_invariants(system, rid)
        return progress(after) == progress(s) and agent.executed("s2") == 1

    hold(nothing_left, for_s=window)
    assert report_statuses(system, rid, "s2").count("accepted") == 1


def test_case_q_report_for_a_never_dispatched_action_is_unknown(make: Make) -> None:
    """q: an agent-side precheck (a ``precheck_wait_<hex>`` the dispatcher never sent)
    reports; it is answered ``unknown``, recorded, and changes nothing; the replay then
    completes without counting it."""
    system = make(**SLOW_WATCHDOG)
    ready_agent(system, "M1", scenario={"actions": {"s0": {"delay_s": 3}}})
    rid = system.start(workflow(*clicks(2)), "M1")
    system.wait_status(rid, "running", where=lambda s: s.current_action_id == "s0")
    before, entries = snapshot(system, rid)
    precheck = ActionReport(replay_id=rid, session_id=before.session_id, machine_id="M1",
                            action_id=f"precheck_wait_{uuid.uuid4().hex[:6]}",
                            attempt_id=uuid.uuid4().hex, success=True)
    ack = system.call("dispatcher", precheck)
    assert isinstance(ack, ReportAck) and ack.status == "unknown", ack
    after, entries_after = snapshot(system, rid)
    assert progress(after) == progress(before) and entries_after == entries
    assert report_statuses(system, rid, precheck.action_id) == ["unknown"]
    s = system.wait_status(rid, "completed", timeout=30)
    assert (s.completed_actions, s.counters.get("reports")) == (2, 2)


def test_case_r_paused_replay_dispatches_nothing_while_agent_stays_connected(make: Make) -> None:
    """r: paused, with Léa connected and heartbeating (our equivalent of "keeps polling"):
    for several liveness periods nothing is dispatched (I6) and the agent stays registered
    without reconnecting; then resume goes on."""
    system = make(**PATIENT)
    tap = Tap(system)
    agent = ready_agent(system, "M1")
    human = {"type": "pause_for_human", "parameters": {"message": "Attendez le médecin"}}
    rid = system.start(workflow(*clicks(1), human, *clicks(2)), "M1")
    system.wait_status(rid, PAUSED)
    tap.wait("lea:replay_paused")  # the tap is live
    quiet_from = time.time()
    check_i6_paused_dispatches_nothing(system, rid, for_s=4 * liveness_period(system),
                                       also=lambda: mmi(system, "agent.M1") == b"200")
    dropped = [e for e in tap.events("lea:peer_disconnected") if e.at >= quiet_from]
    assert dropped == [], dropped
    out = cli(system, "replay", "resume", rid)
    assert out.returncode == 0, out
    system.wait_status(rid, "completed")
    assert [agent.executed(a) for a in ("s0", "s2", "s3")] == [1, 1, 1]
    tap.close()


def test_case_s_broker_killed_mid_replay_agent_reconnects_and_completes(make: Make) -> None:
    """s (SSE buffering: our equivalent is a dropped connection): kill -9 of the broker
    while the agent executes. The agent reconnects and says hello naming the attempt it
    holds, so the dispatcher keeps it instead of sending a copy; its report comes through the
    new broker and the replay completes (not after the 60 s orphan timeout) with every step
    executed exactly once."""
    system = make(**SLOW_WATCHDOG)
    agent = ready_agent(system, "M1")
    dispatcher = system.child_pid("dispatcher")
    rid = system.start(workflow(*clicks(1), wait_ms(5000), *clicks(2)), "M1")
    before = system.wait_status(rid, "running", where=lambda s: s.current_action_id == "s1")
    old = system.kill("broker")
    wait_until(lambda: child_pid(system, "broker") not in (None, old), timeout=10)
    s = system.wait_status(rid, "completed", timeout=30)
    resent = s.counters.get("resent", 0) - before.counters.get("resent", 0)
    assert resent == 0, s.counters  # the hello named it: kept, not re-sent
    assert system.child_pid("dispatcher") == dispatcher  # so not a dispatcher recovery
    assert [agent.executed(a) for a in ("s0", "s2", "s3")] == [1, 1, 1]
    assert report_statuses(system, rid, "s1").count("accepted") == 1
    assert_server_invariants(system, rid)


def test_case_t_idle_agent_stays_registered_through_a_quiet_period(make: Make) -> None:
    """t (NoMachine idle timeout / SSE reconnect): an idle agent with no traffic but
    heartbeats stays registered (mmi.service 200) for many liveness periods, never
    reconnects, and takes the next replay at once."""
    system = make(**PATIENT)
    tap = Tap(system)
    agent = ready_agent(system, "M1")
    first = system.start(workflow(*clicks(1)), "M1")
    system.wait_status(first, "completed")
    tap.wait("lea:replay_completed")  # the tap is live
    quiet_from = time.time()
    checks = hold(lambda: mmi(system, "agent.M1") == b"200",
                  for_s=6 * liveness_period(system), interval=0.5)
    assert checks >= 6
    dropped = [e for e in tap.events("lea:peer_disconnected") if e.at >= quiet_from]
    assert dropped == [], dropped
    rid = system.start(workflow(*clicks(2), workflow_id="wf2"), "M1")
    s = system.wait_status(rid, "completed", timeout=10)
    assert s.counters.get("resent", 0) == 0 and agent.executed("s1") == 1
    tap.close()


def test_case_u_report_from_another_machine_is_refused_and_recorded(make: Make) -> None:
    """u (bearer token expired): we have no tokens (loopback, SSH tunnel or CURVE). The
    nearest rule is docs/protocol.md's "a report is accepted only from the worker the action was
    sent to": a report of M1's in-flight action naming M2 is refused (``wrong_machine``),
    recorded, and changes nothing; M1's own report is then accepted."""
    system = make(**SLOW_WATCHDOG)
    agent = ready_agent(system, "M1", scenario={"actions": {"s0": {"delay_s": 3}}})
    rid = system.start(workflow(*clicks(2)), "M1")
    system.wait_status(rid, "running", where=lambda s: s.current_action_id == "s0")
    before, entries = snapshot(system, rid)
    (entry,) = [e for e in entries if e.replay_id == rid]
    forged = ActionReport(replay_id=rid, session_id=before.session_id, machine_id="M2",
                          action_id="s0", attempt_id=entry.attempt_id, success=True)
    assert refused_call(system, "dispatcher", forged).code == "wrong_machine"
    after, entries_after = snapshot(system, rid)
    assert progress(after) == progress(before) and entries_after == entries
    (row,) = [r for r in reports(system, rid) if r["sender_machine"] == "M2"]
    assert (row["action_id"], row["status"]) == ("s0", "refused")
    s = system.wait_status(rid, "completed", timeout=30)
    assert s.completed_actions == 2 and agent.executed("s0") == 1
    assert report_statuses(system, rid, "s0") == ["refused", "accepted"]
