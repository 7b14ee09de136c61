"""What an agent's (re)start does to the replay, through the real tree and real agents
(docs/architecture.md): an action without input cut by a kill -9 runs again (only input actions are
indeterminate and ask a person), and an agent started after its replay is given the step
once — its hello never makes the dispatcher re-send what is already in its hands."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from tests.conftest import Spawn, wait_until
from tests.integration.system import System, clicks, workflow


def test_a_wait_cut_by_an_agent_restart_runs_again(spawn: Spawn, lea_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("M1", scenario={"actions": {"s1": {"delay_s": 120}}})
    wait = {"type": "wait", "parameters": {"duration_ms": 10}}
    rid = system.start(workflow(*clicks(1), wait, *clicks(1)), "M1")
    entry = wait_until(lambda: (e := system.inflight_of(rid)) is not None
                       and e.action_id == "s1" and e)
    assert entry
    time.sleep(0.5)  # the wait is under way (the scenario holds it 120 s)
    agent.kill(signal.SIGKILL)
    assert agent.scenario_path is not None
    agent.scenario_path.write_text(json.dumps({}))  # the restarted agent waits normally
    agent.start()
    done = system.wait_status(rid, "completed", "paused_need_help")
    assert done.status == "completed", (done.pause_reason, done.pause_message)
    assert done.counters.get("pauses", 0) == 0 and done.completed_actions == 3
    assert agent.executed("s0") == 1 and agent.executed("s2") == 1


def test_a_replay_started_before_its_agent_is_sent_once(spawn: Spawn, lea_env: dict[str, str],
                                                        tmp_path: Path) -> None:
    """The first step waits in the broker for the agent (edge case a's other side); the
    agent's first hello, sent when it connects, must not make the dispatcher send it again:
    zero resends, nothing re-delivered while in progress, each step performed once. (The
    watchdog is held off: its orphan resend after 3 s would be a resend for a reason.)"""
    system = System(spawn, lea_env, tmp_path, {"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60"})
    rid = system.start(workflow(*clicks(3)), "M1")
    system.wait_inflight(rid)
    time.sleep(1.0)  # the dispatch waits in the broker: no worker of agent.M1 yet
    agent = system.agent("M1")
    done = system.wait_status(rid, "completed")
    assert done.counters.get("resent", 0) == 0, done.counters
    assert [agent.executed(f"s{i}") for i in range(3)] == [1, 1, 1]
    logs = "".join(p.read_text() for p in tmp_path.glob("agent-M1-*.log"))
    assert "while in progress" not in logs and "already handled" not in logs
