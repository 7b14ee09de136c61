"""A broker pair (docs/operations.md, "A broker pair"): the tree's broker is the primary, a
second broker process the backup; the actors and agents are given both. kill -9 of the active
broker during replays, twice (the primary, restarted by the supervisor; then the backup that
took over): every replay completes, every input is performed exactly once, and the two
brokers are never active at once."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.broker_pair import PairWatch, broker_state, pair_env
from tests.integration.system import System, clicks, workflow
from tests.integration.transport_checks import assert_client_invariants, wait_ready
from transport.client import SyncClient

AGENTS = 3
STEPS = 40


def _state(endpoint: str) -> str | None:
    said = broker_state(endpoint)
    return None if said is None else str(said["state"])


def test_kill_the_active_broker_twice_during_replays(spawn: Spawn, lea_env: dict[str, str],
                                                     tmp_path: Path) -> None:
    tree_env, backup_env = pair_env(lea_env, tmp_path)
    a, b = lea_env["LEA_MDP_ENDPOINT"], backup_env["LEA_MDP_ENDPOINT"]
    backup = spawn(python_argv("-m", "broker"), env=backup_env, name="broker-b")
    # A slow start on a loaded machine is no hang (the broker is the first child).
    system = System(spawn, lea_env, tmp_path, ready_timeout=90,
                    extra_env={**tree_env, "LEA_BEACON_TIMEOUT_S": "10"})
    system.client = SyncClient([a, b])  # the test's calls move too
    watch = PairWatch(a, b)
    try:
        wait_until(lambda: _state(a) == "active" and _state(b) == "passive", timeout=20)
        agents = [system.agent(f"m{i}", {"default": {"delay_s": 0.05}})
                  for i in range(AGENTS)]
        for agent in agents:
            wait_ready(system, agent)
        wf = workflow(*clicks(STEPS))
        replays = {agent.machine_id: system.start(wf, agent.machine_id) for agent in agents}

        def done_at_least(n: int) -> bool:
            return all(len(agent.effects()) >= min(n, STEPS) for agent in agents)

        # 1. The primary (the tree's broker) dies mid-replay; the supervisor restarts it.
        wait_until(lambda: done_at_least(5), timeout=60)
        system.kill("broker")
        wait_until(lambda: _state(b) == "active", timeout=30)
        # The restarted primary hears the active backup and stays passive.
        wait_until(lambda: _state(a) == "passive", timeout=30)
        progress = min(len(agent.effects()) for agent in agents)
        wait_until(lambda: done_at_least(progress + 5), timeout=60)

        # 2. The backup, now active, dies: the passive primary takes over.
        backup.send_signal(signal.SIGKILL)
        backup.wait(timeout=10)
        wait_until(lambda: _state(a) == "active", timeout=30)
        progress = min(len(agent.effects()) for agent in agents)
        wait_until(lambda: done_at_least(progress + 5), timeout=60)
        # It comes back as a backup: it sees the primary active and stays passive.
        backup = spawn(python_argv("-m", "broker"), env=backup_env, name="broker-b")
        wait_until(lambda: _state(b) == "passive", timeout=30)

        for agent in agents:
            system.wait_status(replays[agent.machine_id], "completed", timeout=120)
        expected = [a.action_id for a in wf.actions]
        for agent in agents:
            assert_client_invariants(system, agent, expected)
    finally:
        watch.close()
    assert watch.both == [], f"two active brokers: {watch.both[:3]}"
    # The watch saw each broker serve in turn (else it proved nothing).
    assert "active" in watch.seen[a] and "active" in watch.seen[b], watch.seen
    assert watch.rounds > 0
