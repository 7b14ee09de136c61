"""Two dispatchers on one PostgreSQL database (actors/dispatcher/leader/election.py), real
processes: the tree (`python run.py`) on PostgreSQL, a second dispatcher (``python -m actors
dispatcher``, the same settings: it reaches the tree's broker by its door), ten real
simulated agents. The second waits as a standby with no worker registered; kill -9 of the
leader in the middle of ten replays: the standby takes over, every replay completes, every
input exactly once on each agent, and the supervisor brings the killed one back as a
standby."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from cli.ping import service_pid
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.broker_pair import pair_env
from tests.integration.system import System, clicks, workflow
from tests.integration.test_dispatcher_postgres import tree_log
from tests.integration.transport_checks import Bus, assert_client_invariants, wait_ready
from transport.client import SyncClient

ROLE = "lea:dispatcher_role"
STEPS = 8


def answering(system: System, times: int = 24) -> Counter[int | None]:
    """Which processes answer ``times`` pings of the ``dispatcher`` service. The broker hands
    each request to the worker connection waiting longest: a standby with a worker of its
    own would answer some of them."""
    return Counter(system.pid("dispatcher") for _ in range(times))


def child(system: System) -> int | None:
    """The tree's dispatcher process, None between an exit and its restart."""
    try:
        return system.child_pid("dispatcher")
    except LookupError:
        return None


def test_a_standby_takes_over_when_the_leader_is_killed_mid_replays(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, pg_url: str) -> None:
    system = System(spawn, lea_env, tmp_path, {"LEA_DATABASE_URL": pg_url}, ready_timeout=90)
    bus = Bus(system.env)
    try:
        leader = system.child_pid("dispatcher")
        second = spawn(python_argv("-m", "actors", "dispatcher"), env=system.env,
                       name="dispatcher-2")
        # The second is a standby: it says so, and only the leader serves the service.
        bus.wait_for(ROLE, role="standby", pid=second.pid, timeout=30)
        assert answering(system) == Counter({leader: 24})
        bus.wait_for(ROLE, role="leader", pid=leader, timeout=30)  # the leader says it too

        agents = [system.agent(f"h{n}", {"default": {"delay_s": 0.2}}) for n in range(10)]
        for agent in agents:
            wait_ready(system, agent)
        rids = [system.start(workflow(*clicks(STEPS)), a.machine_id) for a in agents]
        wait_until(lambda: all(system.status(r).index >= 2 for r in rids), timeout=60)
        before = [system.status(r) for r in rids]
        assert all(s.status == "running" and s.index < STEPS for s in before)
        system.kill("dispatcher")

        # The standby leads (it loaded the replays from the database) ...
        wait_until(lambda: system.pid("dispatcher") == second.pid, timeout=30)
        bus.wait_for(ROLE, role="leader", pid=second.pid, timeout=30)
        # ... and every replay completes, every input exactly once on its agent.
        resent = 0
        for rid, agent, then in zip(rids, agents, before, strict=True):
            summary = system.wait_status(rid, "completed", timeout=90)
            assert summary.completed_actions == STEPS
            assert_client_invariants(system, agent, [f"s{n}" for n in range(STEPS)])
            resent += summary.counters.get("resent", 0) - then.counters.get("resent", 0)
        assert resent > 0  # the new leader re-sent what was in flight at the kill

        # The killed leader came back, restarted by the supervisor, as a standby.
        back = wait_until(lambda: (pid := child(system)) != leader and pid, timeout=30)
        bus.wait_for(ROLE, role="standby", pid=back, timeout=30)
        assert answering(system) == Counter({second.pid: 24})
    finally:
        bus.close()


def test_a_leader_whose_broker_turns_passive_steps_down_for_the_other_server(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, pg_url: str) -> None:
    """Two "servers" on one database: the tree with the primary broker, and a backup broker
    with a dispatcher of its own; each dispatcher reaches only its own broker's door. kill -9
    of the primary broker: the supervisor restarts it, the backup takes over, the tree's
    dispatcher sees its broker no longer serve and steps down (exit 3, back as a standby),
    and the backup's dispatcher leads."""
    tree_env, backup_env = pair_env(lea_env, tmp_path)
    alone = {"LEA_TREE_BACKUP_ENDPOINT": "", "LEA_DATABASE_URL": pg_url}
    spawn(python_argv("-m", "broker"), env={**backup_env, **alone}, name="broker-b")
    system = System(spawn, lea_env, tmp_path, {**tree_env, **alone}, ready_timeout=90)
    bus_b = Bus(backup_env)
    client_b = SyncClient(backup_env["LEA_MDP_ENDPOINT"])
    try:
        second = spawn(python_argv("-m", "actors", "dispatcher"),
                       env={**backup_env, **alone}, name="dispatcher-b")
        bus_b.wait_for(ROLE, role="standby", pid=second.pid, broker_state="passive",
                       timeout=30)
        system.kill("broker")
        bus_b.wait_for(ROLE, role="leader", pid=second.pid, timeout=60)
        wait_until(lambda: service_pid(client_b, "dispatcher") == second.pid, timeout=30)
        log = wait_until(lambda: "exited with code 3" in (text := tree_log(tmp_path)) and
                         text, timeout=30)
        assert "dispatcher: stepping down: our broker says" in str(log)
        wait_until(lambda: tree_log(tmp_path).count("dispatcher: standby") >= 1, timeout=30)
    finally:
        client_b.close()
        bus_b.close()
