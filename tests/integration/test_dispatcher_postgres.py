"""The dispatcher's state in PostgreSQL (``LEA_DATABASE_URL``) on the real tree (`python
run.py`), real simulated agents and a real PostgreSQL server of the test's own
(tests/postgres.py): replays complete, kill -9 of the dispatcher loses and repeats nothing,
a server out of reach at start is said and left to the restart policy, and a server stopped
during a replay stops the dispatcher from deciding until it is back (fail closed)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.system import FAST_WATCHDOG, System, clicks, workflow
from tests.integration.transport_checks import (
    assert_client_invariants,
    dispatcher_kill_9_mid_replays,
    wait_ready,
)
from tests.postgres import Cluster

Env = dict[str, str]


def tree_log(tmp_path: Path) -> str:
    return "".join(log.read_text(errors="replace") for log in tmp_path.glob("tree-*.log"))


def dispatcher_exits(tmp_path: Path, code: int) -> int:
    """How many times the supervisor saw the dispatcher exit with ``code``."""
    return sum(1 for line in tree_log(tmp_path).splitlines()
               if "supervisor: dispatcher (pid" in line and f"exited with code {code}" in line)


def replay_row(url: str, replay_id: str) -> tuple[str, int]:
    with psycopg.connect(url, options="-c search_path=dispatcher") as conn:
        row = conn.execute("SELECT status, version FROM replays WHERE replay_id = %s",
                           (replay_id,)).fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


def test_a_replay_runs_with_the_dispatcher_state_in_postgresql(
        spawn: Spawn, lea_env: Env, tmp_path: Path, pg_url: str) -> None:
    system = System(spawn, lea_env, tmp_path, {"LEA_DATABASE_URL": pg_url})
    agent = system.agent("p1", {"default": {"delay_s": 0.05}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(6)), "p1")
    assert system.wait_status(rid, "completed", timeout=60).completed_actions == 6
    assert_client_invariants(system, agent, [f"s{n}" for n in range(6)])
    status, version = replay_row(pg_url, rid)
    assert status == "completed" and version >= 6  # every transition wrote the row
    assert not (Path(lea_env["LEA_DATA_DIR"]) / "dispatcher.sqlite3").exists()


def test_kill_9_of_the_dispatcher_mid_replays_on_postgresql(
        spawn: Spawn, lea_env: Env, tmp_path: Path, pg_url: str) -> None:
    """As transport case i, on PostgreSQL: every replay completes, every input once."""
    system = System(spawn, lea_env, tmp_path, {"LEA_DATABASE_URL": pg_url})
    dispatcher_kill_9_mid_replays(system, "k", timeout=60)


def test_postgresql_unreachable_at_start_is_said_and_the_restart_policy_applies(
        spawn: Spawn, lea_env: Env, tmp_path: Path, own_pg: Cluster) -> None:
    """The server is down when the tree starts: the dispatcher says so and exits (69); the
    supervisor restarts it until the server is there, then replays run."""
    own_pg.stop()
    started = threading.Event()

    def start_when_refused() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and dispatcher_exits(tmp_path, 69) < 2:
            time.sleep(0.1)
        own_pg.start()
        started.set()

    helper = threading.Thread(target=start_when_refused, daemon=True)
    helper.start()
    system = System(spawn, lea_env, tmp_path, {"LEA_DATABASE_URL": own_pg.url()},
                    ready_timeout=90)
    helper.join(timeout=60)
    assert started.is_set()
    log = tree_log(tmp_path)
    assert f"dispatcher: PostgreSQL at 127.0.0.1:{own_pg.port}/postgres is unreachable" in log
    assert dispatcher_exits(tmp_path, 69) >= 2  # restarted, by the policy, while refused
    agent = system.agent("u1", {"default": {"delay_s": 0.02}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(3)), "u1")
    assert system.wait_status(rid, "completed", timeout=60).completed_actions == 3


@pytest.mark.long  # the restart intensity: test_supervisor.py
def test_postgresql_unreachable_beyond_the_restart_intensity_stops_the_tree(
        spawn: Spawn, lea_env: Env, tmp_path: Path, own_pg: Cluster) -> None:
    own_pg.stop()
    env = {**lea_env, **FAST_WATCHDOG, "LEA_DATABASE_URL": own_pg.url(),
           "LEA_RESTART_INTENSITY": "1", "LEA_RESTART_PERIOD_S": "60"}
    tree = spawn(python_argv("run.py"), env=env, name="tree")
    assert tree.wait(timeout=90) == 1
    assert dispatcher_exits(tmp_path, 69) >= 1  # the start (and the one restart allowed)
    assert "is unreachable" in tree_log(tmp_path)


def test_postgresql_stopped_during_a_replay_stops_decisions_until_it_is_back(
        spawn: Spawn, lea_env: Env, tmp_path: Path, own_pg: Cluster) -> None:
    """Fail closed: with the server down nothing is decided, so no new step is dispatched
    (at most the one already in flight runs); once it is back the replay completes, every
    input exactly once."""
    system = System(spawn, lea_env, tmp_path, {"LEA_DATABASE_URL": own_pg.url()})
    agent = system.agent("s1", {"default": {"delay_s": 0.2}})
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(12)), "s1")
    wait_until(lambda: system.status(rid).index >= 3, timeout=30)
    own_pg.stop("fast")
    performed = len(agent.effects())
    # The dispatcher finds the server gone, stops, is restarted and cannot reach it.
    wait_until(lambda: dispatcher_exits(tmp_path, 69) >= 1, timeout=60)
    assert len(agent.effects()) <= performed + 1  # only what was in flight at the stop
    assert len(agent.effects()) < 12
    own_pg.start()
    summary = system.wait_status(rid, "completed", timeout=90)
    assert summary.completed_actions == 12
    assert_client_invariants(system, agent, [f"s{n}" for n in range(12)])
    assert "lost the database connection" in tree_log(tmp_path) or \
        "cannot commit the turn's decisions" in tree_log(tmp_path)
