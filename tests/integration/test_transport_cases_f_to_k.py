"""The transport contract's edge cases f-k (docs/architecture.md, "The contract's named rules")
on the real tree (`python run.py`) and real agents.

Same approach as test_transport_cases_a_to_e.py: real processes, real signals, and the
dispatcher's reports log, the agents' ledgers and effects logs as evidence.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from messages import Pong, events
from messages.control import Ping
from messages.dispatch import ActionReceived, DispatchAction, DispatchMeta
from tests.conftest import Spawn, wait_until
from tests.integration.system import System, clicks, workflow
from tests.integration.transport_checks import (
    Bus,
    accepted,
    agent_log,
    assert_client_invariants,
    dispatcher_kill_9_mid_replays,
    ledger_row,
    reports,
    wait_ready,
    wait_watchdog_tracks,
)

PAUSED = "paused_need_help"
Env = dict[str, str]


def tree_log(tmp_path: Path) -> str:
    """What the actor tree (``python run.py``) printed so far."""
    return "".join(log.read_text(errors="replace") for log in tmp_path.glob("tree-*.log"))


def test_case_f_watchdog_resends_while_the_agent_still_executes(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """f: s1 takes longer (6 s) than the orphan timeout (3 s): the watchdog resends it with a
    new attempt while the first attempt is still executing.

    Expected: the agent does not execute the re-delivery (it is in progress); its one
    execution is reported to the newest attempt (warning ``already_executed``), so exactly
    one report is applied, none twice, and the replay completes. Meanwhile the agent keeps
    answering (C3).
    """
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("f1", {"actions": {"s1": {"delay_s": 6}}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(3)), "f1")
    wait_until(lambda: (e := system.inflight_of(rid)) and e.action_id == "s1"
               and e.resent_count >= 1, timeout=20)
    row = ledger_row(agent, "s1")
    assert row is not None and row.state == "started"  # the first attempt still executing
    assert isinstance(system.call("agent.f1", Ping()), Pong)  # C3: not blocked meanwhile

    summary = system.wait_status(rid, "completed", timeout=30)
    assert summary.completed_actions == 3 and summary.counters.get("reports") == 3
    [effect] = [e for e in agent.effects() if e["action_id"] == "s1"]
    report = accepted(system, rid, "s1")
    assert report.attempt_id != effect["attempt_id"] and report.warning == "already_executed"
    assert_client_invariants(system, agent, ["s0", "s1", "s2"])


def test_case_g_watchdog_resend_after_the_agent_executed_and_reported_late(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """g: the watchdog re-dispatches s1 after the agent has executed it, its report late.

    In our design the watchdog's resend request and the agent's report reach the dispatcher
    through one FIFO broker queue, so a report sent before the watchdog asks always wins
    (I5 skips the resend). For the re-dispatch to come first, the dispatcher is frozen
    (SIGSTOP) while s1 runs (8 s): the watchdog's resend request (~3.5 s) queues before the
    agent's report (8 s); we freeze it only once the watchdog times s1 (Track is batched).
    Expected once it is back: the resend goes out under a new attempt, the late report of
    the executed attempt is recorded ``stale`` and ignored, the agent answers the re-dispatch
    from its ledger (original report, warning ``already_executed``), one effect line, the
    replay completes.
    """
    # Heartbeats slower than the freeze: were the dispatcher's connections (it has several)
    # expired by the broker meanwhile, the broker would hand the question and the report to
    # two new connections at once, in no order this case can rely on.
    system = System(spawn, lea_env, tmp_path, {"LEA_BEACON_TIMEOUT_S": "60",
                                               "LEA_HEARTBEAT_INTERVAL_MS": "5000"})
    agent = system.agent("g1", {"actions": {"s1": {"delay_s": 8}}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(3)), "g1")
    wait_until(lambda: ledger_row(agent, "s1"), timeout=20)
    first = system.wait_inflight(rid)
    assert first is not None and first.action_id == "s1"
    wait_watchdog_tracks(system, first.attempt_id)  # the watchdog's timer for s1 runs
    dispatcher = system.kill("dispatcher", signal.SIGSTOP)
    try:
        # The agent is frozen too until the watchdog has asked: on a loaded machine its 8 s
        # could otherwise run out first, and the report would queue before the question.
        agent.kill(signal.SIGSTOP)
        try:
            asked = f"s1 (attempt {first.attempt_id}) timed out: asking the dispatcher"
            wait_until(lambda: asked in tree_log(tmp_path), timeout=30)
        finally:
            agent.kill(signal.SIGCONT)
        wait_until(lambda: (row := ledger_row(agent, "s1")) and row.state == "finished",
                   timeout=30)
    finally:
        os.kill(dispatcher, signal.SIGCONT)
    summary = system.wait_status(rid, "completed", timeout=30)
    assert summary.counters.get("resent", 0) >= 1, [
        line for line in tree_log(tmp_path).splitlines() if "watchdog" in line]

    [effect] = [e for e in agent.effects() if e["action_id"] == "s1"]
    assert effect["attempt_id"] == first.attempt_id
    late = [r for r in reports(system, rid, "s1") if r.attempt_id == first.attempt_id]
    assert late and {r.status for r in late} == {"stale"}
    report = accepted(system, rid, "s1")
    assert (report.success, report.warning) == (True, "already_executed")
    assert "s1 already handled" in agent_log(agent)  # answered from the ledger
    assert_client_invariants(system, agent, ["s0", "s1", "s2"])


def test_case_h_dead_client_pauses_the_replay(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """h: the agent is dead silently (frozen for good).

    Expected: each action is resent RPA_WATCHDOG_MAX_RESENDS (2) times, then given up. D2:
    a given-up wait is logged and the replay goes on; the second give-up on the session
    within 60 s emits ``lea:dead_client_signal`` and pauses the replay, reason
    ``dead_client`` ("Léa ne répond plus"). On another machine a given-up click (critical)
    pauses at once, reason ``orphan_max_resends``.
    """
    system = System(spawn, lea_env, tmp_path, {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "1.5"})
    bus = Bus(system.env)
    try:
        dead, lost = system.agent("h1"), system.agent("h2")
        for agent in (dead, lost):
            wait_ready(system, agent)
            agent.kill(signal.SIGSTOP)
        wait = {"type": "wait", "parameters": {"duration_ms": 100}}
        r_dead = system.start(workflow(wait, wait, *clicks(1)), "h1")
        r_lost = system.start(workflow(*clicks(2)), "h2")

        paused = system.wait_status(r_dead, PAUSED, timeout=60)
        # s0 was passed (D2); s1 is the step a resume redoes.
        assert paused.pause_reason == "dead_client" and paused.index == 1
        assert paused.pause_message is not None and "Léa ne répond plus" in paused.pause_message
        signal_ = bus.wait_for(events.DEAD_CLIENT_SIGNAL, session_id=paused.session_id)
        assert signal_.data["dead_count"] == 2
        gave_up = bus.events(events.DISPATCH_ORPHAN_GIVEUP, replay_id=r_dead)
        assert [(e.data["action_id"], e.data["critical"], e.data["resent_count"])
                for e in gave_up] == [("s0", False, 2), ("s1", False, 2)]
        assert system.inflight_of(r_dead) is None  # the click s2 is never dispatched

        lost_paused = system.wait_status(r_lost, PAUSED, timeout=60)
        assert lost_paused.pause_reason == "orphan_max_resends" and lost_paused.index == 0
        gave_up = bus.events(events.DISPATCH_ORPHAN_GIVEUP, replay_id=r_lost)
        assert [(e.data["action_id"], e.data["critical"]) for e in gave_up] == [("s0", True)]
        assert not bus.events(events.DEAD_CLIENT_SIGNAL, session_id=lost_paused.session_id)
        assert dead.effects() == [] and lost.effects() == []
    finally:
        bus.close()


def test_case_i_dispatcher_kill_9_mid_replay(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """i: the dispatcher is killed (kill -9) while three replays run on three machines.

    D1 (instead of the origin spec's "state lost"): the supervisor restarts it, it reloads every
    replay from SQLite, re-sends each in-flight action with a new attempt id, and every
    replay continues where it was: every step exactly once, in order, on each machine.
    """
    dispatcher_kill_9_mid_replays(System(spawn, lea_env, tmp_path), "i")


def test_case_j_two_agents_for_one_machine_and_agents_side_by_side(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """j: a second agent process starts for a machine that already has one (same data dir),
    while agents of two machines run replays concurrently.

    The origin spec answers concurrent polls with ``server_busy``; here the second process is
    refused at start by the ledger lock (exit 2, a clear message), so only one process ever
    executes for a machine and order is preserved. Two machines run side by side without
    interfering: each performs only its own steps, each once, in order.
    """
    system = System(spawn, lea_env, tmp_path)
    one = system.agent("j1", {"default": {"delay_s": 0.3}})
    other = system.agent("j2", {"default": {"delay_s": 0.3}})
    wait_ready(system, one)
    wait_ready(system, other)
    r_one = system.start(workflow(*clicks(8)), "j1")
    r_other = system.start(workflow(*clicks(8)), "j2")
    wait_until(lambda: system.status(r_one).index >= 1, timeout=20)

    twin = system.agent("j1")  # same machine id, same data dir
    assert twin.proc is not None and twin.proc.wait(timeout=30) == 2
    assert "is in use by another agent" in agent_log(twin)
    assert one.proc is not None and one.proc.poll() is None

    steps = [f"s{n}" for n in range(8)]
    for rid, agent in ((r_one, one), (r_other, other)):
        assert system.wait_status(rid, "completed", timeout=30).completed_actions == 8
        assert_client_invariants(system, agent, steps)


def test_case_k_same_dispatch_delivered_twice(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """k: a DispatchAction reaches the agent twice (a network double): we send copies of
    what the dispatcher sent straight to ``agent.k1`` while the replay runs.

    Expected: never executed again. The same attempt of a finished action is answered with
    the very report it had; a copy under another attempt with that report, warning
    ``already_executed``; the dispatcher records both as ``duplicate`` and applies nothing.
    A copy of the action being executed is ignored (its report comes once). The replay
    completes with every step once. The watchdog is held off (orphan timeout 30 s): the
    only copies are ours.
    """
    system = System(spawn, lea_env, tmp_path, {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "30"})
    agent = system.agent("k1", {"actions": {"s1": {"delay_s": 3}}})
    wait_ready(system, agent)
    wf = workflow(*clicks(3))
    rid = system.start(wf, "k1")
    # s1 executing, s0's report acked (a copy while it is unacked only waits for it).
    wait_until(lambda: ledger_row(agent, "s1") and (row := ledger_row(agent, "s0"))
               and not row.unacked, timeout=20)
    session = system.status(rid).session_id
    s0, s1 = ledger_row(agent, "s0"), ledger_row(agent, "s1")
    assert s0 is not None and s1 is not None and s1.state == "started"

    def again(step: int, attempt_id: str) -> None:
        copy = DispatchAction(replay_id=rid, session_id=session, machine_id="k1",
                              action=wf.actions[step], attempt_id=attempt_id,
                              dispatch_meta=DispatchMeta(first_dispatched_at=time.time()))
        assert isinstance(system.call("agent.k1", copy), ActionReceived)

    again(0, s0.attempt_id)
    again(0, "double")
    again(1, s1.attempt_id)
    wait_until(lambda: len(reports(system, rid, "s0")) == 3, timeout=20)
    first, same, other = reports(system, rid, "s0")
    assert (first.status, first.attempt_id, first.warning) == ("accepted", s0.attempt_id, None)
    assert (same.status, same.attempt_id, same.warning) == ("duplicate", s0.attempt_id, None)
    assert (other.status, other.attempt_id, other.warning) == (
        "duplicate", "double", "already_executed")

    summary = system.wait_status(rid, "completed", timeout=30)
    assert summary.completed_actions == 3 and summary.counters.get("reports") == 3
    assert [(r.status, r.warning) for r in reports(system, rid, "s1")] == [("accepted", None)]
    assert_client_invariants(system, agent, ["s0", "s1", "s2"])
