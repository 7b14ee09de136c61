"""A broker pair with a whole tree on each side, as on two servers (docs/two-servers.md,
"Running on two servers"): the primary's tree and the backup's, one PostgreSQL, each tree's
actors reaching only their own broker. kill -9 of the active tree's broker during replays, the
primary's then the backup's (each restarted by its supervisor): every replay completes, every
input is performed exactly once, the brokers are never active at once, and no click after a
takeover goes without the monitor router's answer (``router_unavailable``): the actors of the
side that was passive serve as soon as their broker does (transport/worker.py, a passive
broker's DISCONNECT; docs/operations.md, "A broker pair")."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

from actors import ACTORS
from supervision.tree import child_pid
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.broker_pair import PairWatch, broker_state, pair_env
from tests.integration.system import FAST_WATCHDOG, Agent, System, clicks, tree_door, workflow
from tests.integration.transport_checks import assert_client_invariants, wait_ready
from transport.client import SyncClient

AGENTS = 2
STEPS = 60
PASSIVE_HEARTBEATS = 40
"""Heartbeats the backup's tree waits passive before the first kill: long enough for a
back-off doubling from 0.1 s to reach its 10 s cap."""


def _state(endpoint: str) -> str | None:
    said = broker_state(endpoint)
    return None if said is None else str(said["state"])


def _command(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``run.py replay status`` of a replay that does not exist, on the server of ``env``."""
    return subprocess.run(python_argv("run.py", "replay", "status", "no-such-replay",
                                      "--timeout", "1"),
                          env=env, capture_output=True, text=True, timeout=60)


def _monitors(agents: list[Agent], since: dict[str, int]) -> Counter[str | None]:
    """How the clicks performed after ``since`` (effects per agent) were routed."""
    return Counter(e.get("monitor") for agent in agents
                   for e in agent.effects()[since[agent.machine_id]:])


def test_each_trees_broker_killed_once(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, pg_url: str) -> None:
    tree_env, backup_env = pair_env(lea_env, tmp_path)
    own_door_only = {"LEA_TREE_BACKUP_ENDPOINT": "", "LEA_DATABASE_URL": pg_url}
    a, b = lea_env["LEA_MDP_ENDPOINT"], backup_env["LEA_MDP_ENDPOINT"]
    # The backup's tree first: the primary serves once it hears the backup, or once a peer
    # comes after the expiry; the test's calls, through the tree's doors, do not count as
    # one (docs/operations.md, "A broker pair", at start).
    tree_b = spawn(python_argv("run.py"), name="tree-b", env={
        **backup_env, **FAST_WATCHDOG, "LEA_RESTART_INTENSITY": "50", **own_door_only})
    system = System(spawn, lea_env, tmp_path, {**tree_env, **own_door_only}, ready_timeout=90)
    # The test speaks as the tree (starts are taken from its door or the people's, not from
    # the plain endpoint), at the door of the broker that serves.
    system.client = SyncClient([tree_door(system.env), tree_door(backup_env)])
    watch = PairWatch(a, b)
    try:
        wait_until(lambda: _state(a) == "active" and _state(b) == "passive", timeout=30)
        wait_until(lambda: all(child_pid(tree_b.pid, name) for name in ACTORS), timeout=60)
        heartbeat_s = int(lea_env["LEA_HEARTBEAT_INTERVAL_MS"]) / 1000
        # The backup's actors are turned away while it is passive, heartbeat after heartbeat.
        wait_until(lambda: (broker_state(b) or {}).get("refused", 0) >= PASSIVE_HEARTBEATS,
                   timeout=PASSIVE_HEARTBEATS * heartbeat_s * 4)
        # A person's command on the passive server is told so at once, not left to wait.
        on_b, on_a = _command(backup_env), _command({**lea_env, **tree_env})
        assert on_b.returncode == 1 and "broker_passive" in on_b.stderr, on_b.stderr
        assert "broker_passive" not in on_a.stderr, on_a.stderr
        agents = [system.agent(f"m{i}", {"default": {"delay_s": 0.05}}) for i in range(AGENTS)]
        for agent in agents:
            wait_ready(system, agent)
        wf = workflow(*clicks(STEPS))
        replays = {agent.machine_id: system.start(wf, agent.machine_id) for agent in agents}

        def progress() -> int:
            return min(len(agent.effects()) for agent in agents)

        def done_at_least(n: int) -> bool:
            return progress() >= min(n, STEPS)

        # 1. The primary's tree's broker dies; the backup's tree takes over.
        wait_until(lambda: done_at_least(5), timeout=60)
        since = {agent.machine_id: len(agent.effects()) for agent in agents}
        system.kill("broker")
        wait_until(lambda: _state(b) == "active" and _state(a) == "passive", timeout=30)
        at_takeover = progress()
        wait_until(lambda: done_at_least(at_takeover + 10), timeout=60)
        first = _monitors(agents, since)
        # 2. The backup's tree's broker dies; the primary's tree takes over again.
        since = {agent.machine_id: len(agent.effects()) for agent in agents}
        broker_b = child_pid(tree_b.pid, "broker")
        assert broker_b is not None
        os.kill(broker_b, signal.SIGKILL)
        wait_until(lambda: _state(a) == "active" and _state(b) == "passive", timeout=30)
        for agent in agents:
            system.wait_status(replays[agent.machine_id], "completed", timeout=120)
        second = _monitors(agents, since)
        expected = [action.action_id for action in wf.actions]
        for agent in agents:
            assert_client_invariants(system, agent, expected)
    finally:
        watch.close()
    # Every click after each takeover was routed by the monitor router of the side that
    # took over (else: composite_fallback, router_unavailable).
    assert first["router_unavailable"] == 0 and second["router_unavailable"] == 0, (first,
                                                                                   second)
    assert first.total() >= 10 * AGENTS and second.total() > 0, (first, second)
    assert watch.both == [], f"two active brokers: {watch.both[:3]}"
    assert "active" in watch.seen[a] and "active" in watch.seen[b], watch.seen

