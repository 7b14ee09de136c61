"""`python run.py` for real: the broker and the six actors under the supervisor, killed,
frozen and crash-looped with real signals, watched through `ping` and `tap`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from actors import ACTORS
from cli.ping import service_pid
from supervision.tree import child_pid
from tests.conftest import Spawn, python_argv, wait_until
from transport.client import SyncClient


def all_pids(client: SyncClient) -> dict[str, int | None]:
    return {name: service_pid(client, name) for name in ACTORS}


def broker_pid(tree: subprocess.Popen[bytes]) -> int | None:
    return child_pid(tree.pid, "broker")


class Tree:
    def __init__(self, spawn: Spawn, env: dict[str, str], tmp_path: Path) -> None:
        self.env = env
        self.proc = spawn(python_argv("run.py"), env=env, name="tree")
        self.tap_log = tmp_path / "tap.jsonl"
        self.tap = spawn(python_argv("run.py", "tap", "--json"), env=env, name="tap",
                         stdout=open(self.tap_log, "wb"))  # noqa: SIM115
        self.client = SyncClient(env["LEA_MDP_ENDPOINT"])
        self.pids: dict[str, int | None] = {}
        try:
            wait_until(lambda: all(p is not None for p in self.refresh().values()), timeout=30)
        except pytest.fail.Exception:
            silent = sorted(name for name, pid in self.pids.items() if pid is None)
            pytest.fail(f"the tree started, but these never answered ping: {silent}")

    def refresh(self) -> dict[str, int | None]:
        self.pids = all_pids(self.client)
        return self.pids

    def events(self, topic: str) -> list[dict[str, object]]:
        lines = self.tap_log.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["topic"] == topic]


@pytest.fixture
def tree(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> Tree:
    # Six kills in a row would exceed the default intensity (5 in 30 s), which is tested apart.
    return Tree(spawn, dict(lea_env, LEA_RESTART_INTENSITY="20"), tmp_path)


def test_kill_9_each_actor_in_turn(tree: Tree) -> None:
    for name in ACTORS:
        before = dict(tree.pids)
        victim = before[name]
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda n=name, v=victim: service_pid(tree.client, n) not in (None, v),
                   timeout=10)
        back_after = time.monotonic() - killed_at
        assert back_after < 3.0, f"{name} answered ping {back_after:.2f}s after kill -9"
        after = tree.refresh()
        for other in ACTORS:
            if other != name:
                assert after[other] == before[other], f"{other} was restarted too"
    # `tap` showed every exit and restart, with the signal.
    wait_until(lambda: len(tree.events("lea:actor_restarted")) >= len(ACTORS))
    exited = tree.events("lea:actor_exited")
    assert {e["data"]["name"] for e in exited} >= set(ACTORS)  # type: ignore[index]
    assert all(e["data"]["signal"] == "SIGKILL" for e in exited)  # type: ignore[index]
    restarted = {e["data"]["name"] for e in tree.events("lea:actor_restarted")}  # type: ignore[index]
    assert restarted == set(ACTORS)


def test_a_frozen_actor_is_detected_and_replaced(tree: Tree) -> None:
    victim = tree.pids["loop_detector"]
    assert victim is not None
    os.kill(victim, signal.SIGSTOP)
    wait_until(lambda: service_pid(tree.client, "loop_detector") not in (None, victim), timeout=15)
    wait_until(lambda: any(e["data"]["reason"] == "hung"  # type: ignore[index]
                           for e in tree.events("lea:actor_exited")))
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)


def test_kill_9_of_the_broker_keeps_the_actors(tree: Tree) -> None:
    before = dict(tree.pids)
    old_broker = broker_pid(tree.proc)
    assert old_broker is not None
    os.kill(old_broker, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: broker_pid(tree.proc) not in (None, old_broker), timeout=5)
    wait_until(lambda: all(p is not None for p in tree.refresh().values()), timeout=10)
    registered_after = time.monotonic() - killed_at
    assert registered_after < 5.0, f"actors registered again {registered_after:.2f}s after"
    assert tree.pids == before, "an actor was restarted because the broker died"


def test_crash_loop_stops_the_tree_with_non_zero_exit(
    spawn: Spawn, lea_env: dict[str, str], tmp_path: Path
) -> None:
    env = dict(lea_env, LEA_RESTART_INTENSITY="3", LEA_RESTART_PERIOD_S="60")
    tree = Tree(spawn, env, tmp_path)
    for _ in range(10):
        pid = service_pid(tree.client, "safety_checks")
        if tree.proc.poll() is not None:
            break
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    assert tree.proc.wait(timeout=30) != 0
    # The whole tree is gone, the broker included.
    assert all(p is None for p in all_pids(tree.client).values())


def test_sigterm_stops_everything_with_exit_0(tree: Tree) -> None:
    tree.proc.send_signal(signal.SIGTERM)
    assert tree.proc.wait(timeout=30) == 0
    for pid in tree.pids.values():
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    exited = tree.events("lea:actor_exited")
    assert [e["data"]["reason"] for e in exited] == ["shutdown"] * len(exited)  # type: ignore[index]


def test_ping_command_reports_a_missing_service(tree: Tree) -> None:
    ok = subprocess.run(python_argv("run.py", "ping"), env=tree.env, capture_output=True,
                        text=True, timeout=30, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count(" ok ") == len(ACTORS)
    missing = subprocess.run(python_argv("run.py", "ping", "dispatcher", "no_such_service"),
                             env=tree.env, capture_output=True, text=True, timeout=30,
                             check=False)
    assert missing.returncode == 1
    assert "no_such_service" in missing.stdout and "missing" in missing.stdout
