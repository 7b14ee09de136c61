"""A broker pair (docs/operations.md, "A broker pair"): the tree's broker is the primary, a
second broker process the backup; the actors and agents are given both. kill -9 of the active
broker during replays, twice (the primary, restarted by the supervisor; then the backup that
took over): every replay completes, every input is performed exactly once, and the two
brokers are never active at once. The tree's console and supervisor follow: a scraper sees
the roles swap and the steps go on, and the supervisor's record of the broker's restart
reaches the trail through the backup while the primary stands by."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.conftest import Spawn, free_port, python_argv, wait_until
from tests.integration.broker_pair import PairWatch, broker_state, pair_env
from tests.integration.system import System, clicks, tree_door, workflow
from tests.integration.test_console_metrics import Samples, scrape
from tests.integration.trail_checks import outbox_rows
from tests.integration.transport_checks import assert_client_invariants, wait_ready
from transport.client import SyncClient

AGENTS = 3
STEPS = 40
TOKEN = "a-scrape-token-for-the-pair-tests-01"


def _state(endpoint: str) -> str | None:
    said = broker_state(endpoint)
    return None if said is None else str(said["state"])


def _role(s: Samples, endpoint: str, configured: str, role: str) -> float:
    labels = (("configured", configured), ("endpoint", endpoint), ("role", role))
    return s.get(("lea_broker_role", labels), -1)


def _steps(s: Samples) -> float:
    return s.get(("lea_steps_completed_total", ()), -1)


def test_kill_the_active_broker_twice_during_replays(spawn: Spawn, lea_env: dict[str, str],
                                                     tmp_path: Path) -> None:
    tree_env, backup_env = pair_env(lea_env, tmp_path)
    a, b = lea_env["LEA_MDP_ENDPOINT"], backup_env["LEA_MDP_ENDPOINT"]
    backup = spawn(python_argv("-m", "broker"), env=backup_env, name="broker-b")
    # A slow start on a loaded machine is no hang (the broker is the first child).
    port = free_port()
    system = System(spawn, lea_env, tmp_path, ready_timeout=90,
                    extra_env={**tree_env, "LEA_BEACON_TIMEOUT_S": "10",
                               "LEA_CONSOLE_PORT": str(port), "LEA_CONSOLE_TOKEN": TOKEN})
    # The test's calls move too (it speaks as the tree: the brokers' doors of the tree).
    system.client = SyncClient([tree_door(system.env), tree_door(backup_env)])
    data_dir = Path(system.env["LEA_DATA_DIR"])
    scraper = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10,
                           headers={"Authorization": f"Bearer {TOKEN}"})
    watch = PairWatch(a, b)
    try:
        wait_until(lambda: _state(a) == "active" and _state(b) == "passive", timeout=20)
        before = seen(scraper, lambda s: _role(s, a, "primary", "active") == 1
                      and _role(s, b, "backup", "backup") == 1)
        assert _steps(before) == 0
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
        # The scraper sees the roles swapped and the steps going on through the backup.
        swapped = seen(scraper, lambda s: _role(s, b, "backup", "active") == 1
                       and _role(s, a, "primary", "backup") == 1
                       and _steps(s) >= AGENTS * (progress + 5))
        assert _role(swapped, a, "primary", "active") == 0
        # The supervisor's record of the restart went through the backup: its outbox empties
        # while the primary stands by.
        wait_until(lambda: outbox_rows(data_dir, "supervisor") == [], timeout=30)
        assert _state(a) == "passive"

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
        scraper.close()
    assert watch.both == [], f"two active brokers: {watch.both[:3]}"
    # The watch saw each broker serve in turn (else it proved nothing).
    assert "active" in watch.seen[a] and "active" in watch.seen[b], watch.seen
    assert watch.rounds > 0


def seen(scraper: httpx.Client, check: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``check`` holds; the console restarts with the broker (the supervisor's
    strategy), so a refused connection is a scrape to do again."""
    found: list[Samples] = []

    def holds() -> bool:
        try:
            found[:] = [scrape(scraper)]
        except httpx.HTTPError:
            return False
        return check(found[0])

    wait_until(holds, timeout=30, interval=0.2)
    return found[0]
