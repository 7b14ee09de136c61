"""The transport contract's edge cases a-e (docs/architecture.md, "The contract's named rules")
on the real tree (`python run.py`) and real agents.

Each test freezes, kills or steers (scenario file) real processes, then checks what they
left behind: the dispatcher's reports log, the agent's ledger and its effects log, where
one line per input proves exactly-once (C4). Cases f-k: test_transport_cases_f_to_k.py.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from agent.executors.scenario import CRASH_EXIT_CODE
from messages.dispatch import InFlight
from messages.replay import ReplayResumed, ResumeReplay
from tests.conftest import Spawn, wait_until
from tests.integration.system import System, clicks, workflow
from tests.integration.transport_checks import (
    accepted,
    agent_log,
    assert_client_invariants,
    ledger,
    ledger_row,
    reports,
    wait_ready,
    wait_registered,
)

PAUSED = "paused_need_help"
Env = dict[str, str]


def test_case_a_agent_frozen_before_the_dispatch_reaches_it(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """a: the agent is frozen (SIGSTOP) and the broker has dropped it when the first action is
    dispatched, so the dispatch never reaches it.

    Expected: the watchdog finds the orphan and the dispatcher resends it with a new
    attempt_id (resent_count 1); once the agent is back (SIGCONT) the step runs exactly once
    (the copies that queued up meanwhile, and the resend its hello triggers, are answered
    without executing) and the replay completes.
    """
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("a1")
    wait_ready(system, agent)
    agent.kill(signal.SIGSTOP)
    wait_registered(system, "a1", present=False)

    rid = system.start(workflow(*clicks(3)), "a1")
    first = system.wait_inflight(rid)
    assert first is not None and (first.action_id, first.resent_count) == ("s0", 0)
    resent = wait_until(lambda: (e := system.inflight_of(rid)) and e.resent_count == 1 and e,
                        timeout=20)
    assert isinstance(resent, InFlight) and resent.action_id == "s0"
    assert resent.attempt_id != first.attempt_id
    assert ledger(agent) == []  # nothing received, nothing started

    agent.kill(signal.SIGCONT)
    summary = system.wait_status(rid, "completed", timeout=30)
    assert summary.completed_actions == 3
    assert_client_invariants(system, agent, ["s0", "s1", "s2"])


def test_case_b_agent_killed_after_receiving_before_executing(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """b: the agent received s1 and marked it started on disk, then was killed (kill -9)
    before performing the input (the scenario hangs before the effect).

    Our design differs from the origin spec (which re-executes): the restarted agent cannot know
    whether the input happened, so it reports s1 ``needs_human`` with error
    ``indeterminate_after_restart`` and the replay pauses; nothing is executed, nothing is
    guessed. A person finds s1 not done and resumes with ``step="redo"``: ``s1_resume``
    runs once and the replay completes. The
    watchdog is held off (orphan timeout 30 s): a slow restart must not turn this into a
    give-up (case h).
    """
    system = System(spawn, lea_env, tmp_path, {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "30"})
    agent = system.agent("b1", {"actions": {"s1": {"delay_s": 60}}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(3)), "b1")
    wait_until(lambda: (row := ledger_row(agent, "s1")) and row.state == "started", timeout=20)
    agent.kill(signal.SIGKILL)
    assert agent.executed("s1") == 0

    assert agent.scenario_path is not None
    agent.scenario_path.write_text("{}")  # the restarted agent behaves normally
    agent.start()
    paused = system.wait_status(rid, PAUSED, timeout=30)
    assert paused.pause_reason == "input_unknown"
    assert paused.pause_message is not None and "redémarré" in paused.pause_message
    verdict = accepted(system, rid, "s1")
    assert (verdict.success, verdict.error) == (False, "indeterminate_after_restart")
    assert agent.executed("s1") == 0
    assert system.inflight_of(rid) is None  # I6: a paused replay dispatches nothing

    reply = system.call("dispatcher", ResumeReplay(replay_id=rid, operator="test",
                                                   step="redo"))
    assert isinstance(reply, ReplayResumed)
    system.wait_status(rid, "completed", timeout=30)
    assert_client_invariants(system, agent, ["s0", "s1_resume", "s2"])


def test_case_c_agent_executes_then_dies_before_reporting(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """c: the agent performs s1's click, then dies before reporting (scenario crash after
    the effect, like a power cut).

    Expected (docs/architecture.md, stricter than the origin spec's re-dispatch): after the restart
    s1 is started-but-unfinished in the ledger → reported ``indeterminate_after_restart``, the
    replay pauses for a person; the re-dispatches (hello, watchdog) are answered from the
    ledger, so the effects log holds exactly one line for s1, never two. Watchdog held
    off as in case b.
    """
    system = System(spawn, lea_env, tmp_path, {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "30"})
    agent = system.agent("c1", {"actions": {"s1": {"crash": "after"}}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(3)), "c1")
    assert agent.proc is not None and agent.proc.wait(timeout=30) == CRASH_EXIT_CODE
    assert agent.executed("s1") == 1

    assert agent.scenario_path is not None
    agent.scenario_path.write_text("{}")
    agent.start()
    paused = system.wait_status(rid, PAUSED, timeout=30)
    assert paused.pause_reason == "input_unknown"
    assert accepted(system, rid, "s1").error == "indeterminate_after_restart"
    assert system.inflight_of(rid) is None  # nothing left for the watchdog to resend
    assert_client_invariants(system, agent, ["s0", "s1"])


def test_case_d_report_not_received_is_retried_by_the_agent(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """d: the agent reports s1 while the dispatcher cannot receive it (SIGSTOP).

    Expected: the agent keeps re-sending the same report on its backoff (1 s, 3 s, 7 s...)
    until acked; once the dispatcher is back (SIGCONT) that very report (same attempt) is
    accepted, once, and the replay completes. The watchdog is held off (orphan timeout
    60 s) and the supervisor's hang detection too (beacon 60 s) so nothing but the agent's
    retry can save the report.
    """
    system = System(spawn, lea_env, tmp_path, {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60",
                                               "LEA_BEACON_TIMEOUT_S": "60"})
    agent = system.agent("d1", {"actions": {"s1": {"delay_s": 1}}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(3)), "d1")
    wait_until(lambda: ledger_row(agent, "s1"), timeout=20)
    dispatcher = system.kill("dispatcher", signal.SIGSTOP)
    try:
        wait_until(lambda: (row := ledger_row(agent, "s1")) and row.state == "finished"
                   and row.unacked, timeout=20)
        # Sent three times (first try, then after 1 s and 3 s), still unanswered.
        wait_until(lambda: f"re-sending report:{rid}:s1 to dispatcher (try 3"
                   in agent_log(agent), timeout=20)
    finally:
        os.kill(dispatcher, signal.SIGCONT)
    system.wait_status(rid, "completed", timeout=30)
    assert system.child_pid("dispatcher") == dispatcher  # not restarted: the retry did it

    [effect] = [e for e in agent.effects() if e["action_id"] == "s1"]
    assert accepted(system, rid, "s1").attempt_id == effect["attempt_id"]
    assert {r.attempt_id for r in reports(system, rid, "s1")} == {effect["attempt_id"]}
    assert_client_invariants(system, agent, ["s0", "s1", "s2"])


def test_case_e_business_retry_then_success_or_pause(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """e: the agent reports ``success: false`` (target_not_found) with retry budget left.

    Expected: the dispatcher queues ``s1_retry1``, ``s1_retry2``... at the head (a verify
    failure is not a transport resend). Machine e1 fails twice then succeeds on
    ``s1_retry2``: the replay completes. Machine e2 always fails: after
    MAX_RETRIES_PER_ACTION (3) retries the replay pauses, reason ``target_not_found``.
    """
    system = System(spawn, lea_env, tmp_path)
    ok = system.agent("e1", {"actions": {"s1": {"fail": "target_not_found", "times": 2}}})
    ko = system.agent("e2", {"actions": {"s1": {"fail": "target_not_found"}}})
    wait_ready(system, ok)
    wait_ready(system, ko)
    r_ok = system.start(workflow(*clicks(3)), "e1")
    r_ko = system.start(workflow(*clicks(3)), "e2")

    done = system.wait_status(r_ok, "completed", timeout=30)
    assert done.counters.get("retries") == 2 and done.completed_actions == 3
    tried = [(r.action_id, r.error) for r in reports(system, r_ok) if r.status == "accepted"]
    assert tried == [("s0", None), ("s1", "target_not_found"),
                     ("s1_retry1", "target_not_found"), ("s1_retry2", None), ("s2", None)]
    assert_client_invariants(system, ok, ["s0", "s1_retry2", "s2"])

    paused = system.wait_status(r_ko, PAUSED, timeout=30)
    assert paused.pause_reason == "target_not_found"
    assert paused.pause_message is not None and "Je n'y arrive pas" in paused.pause_message
    failed = [r.action_id for r in reports(system, r_ko) if r.error == "target_not_found"]
    assert failed == ["s1", "s1_retry1", "s1_retry2", "s1_retry3"]
    assert_client_invariants(system, ko, ["s0"])
