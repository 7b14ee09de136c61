"""The rules that keep a broker pair from having two active brokers, on real broker processes
(docs/operations.md, "A broker pair"): a backup that never saw its primary never serves; a
passive broker that lost its peer stays passive until a peer comes to it, then serves; an
operator sees where each broker stands (``run.py brokers``, ``run.py ping mmi.broker``)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import zmq

from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.broker_pair import broker_state, pair_env
from transport.client import SyncClient
from transport.worker import Worker


def said(endpoint: str) -> dict[str, Any]:
    state = broker_state(endpoint)
    assert state is not None, f"the broker at {endpoint} does not answer mmi.broker"
    return state


def test_a_backup_that_never_saw_its_primary_turns_peers_away(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    _tree_env, backup_env = pair_env(lea_env, tmp_path)
    b = backup_env["LEA_MDP_ENDPOINT"]
    spawn(python_argv("-m", "broker"), env=backup_env, name="broker-b")
    wait_until(lambda: broker_state(b) is not None, timeout=30)
    ctx: zmq.Context[Any] = zmq.Context()
    worker = Worker(ctx, b, "echo", 0.25, 3)
    try:
        def refused_twice() -> bool:  # its READY is answered DISCONNECT, again and again
            worker.drain()
            worker.tick()
            # As a passive broker: no refusal of the worker's, which asks again each beat.
            return worker.passive >= 2 and worker.refusals == 0

        wait_until(refused_twice, timeout=30)
        state = said(b)
        assert state["state"] == "backup" and state["refused"] >= 2
        assert SyncClient(b, ctx).raw("mmi.service", b"echo", timeout_s=1.0) == [b"404"]
    finally:
        worker.close()
        ctx.destroy(linger=0)


def test_a_passive_broker_that_lost_its_peer_serves_only_once_a_peer_comes(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    tree_env, backup_env = pair_env(lea_env, tmp_path)
    a, b = lea_env["LEA_MDP_ENDPOINT"], backup_env["LEA_MDP_ENDPOINT"]
    expiry_s = int(lea_env["LEA_HEARTBEAT_INTERVAL_MS"]) * int(
        lea_env["LEA_HEARTBEAT_LIVENESS"]) / 1000
    primary = spawn(python_argv("-m", "broker"), env={**lea_env, **tree_env},
                    name="broker-a")
    spawn(python_argv("-m", "broker"), env=backup_env, name="broker-b")
    wait_until(lambda: broker_state(a) is not None
               and said(a)["state"] == "active" and said(b)["state"] == "passive",
               timeout=30)
    operator = {**lea_env, **tree_env}  # given both brokers, as a command on server A
    assert brokers(operator) == (0, [(a, "primary", "active"), (b, "backup", "passive")])
    pinged = subprocess.run(python_argv("run.py", "ping", "mmi.broker", "--json"),
                            env=operator, capture_output=True, text=True, timeout=60)
    assert pinged.returncode == 0, pinged.stderr
    assert json.loads(json.loads(pinged.stdout)["answer"])["state"] == "active"
    primary.send_signal(signal.SIGKILL)
    primary.wait(timeout=10)
    assert brokers(operator) == (1, [(a, None, "unreachable"), (b, "backup", "passive")])
    # The backup has lost its peer (past the expiry) but no client nor worker came:
    # it stays passive, whatever the time (mmi.broker does not count as one coming).
    wait_until(lambda: (said(b)["peer_heard_s_ago"] or 0) > 2 * expiry_s, timeout=30)
    assert said(b)["state"] == "passive"
    # A worker comes: the backup takes over and registers it.
    ctx: zmq.Context[Any] = zmq.Context()
    worker = Worker(ctx, b, "echo", 0.25, 3)
    client = SyncClient(b, ctx)
    try:
        def served() -> bool:
            worker.drain()
            worker.tick()
            return client.raw("mmi.service", b"echo", timeout_s=1.0) == [b"200"]

        wait_until(served, timeout=30)
        assert said(b)["state"] == "active"
    finally:
        worker.close()
        ctx.destroy(linger=0)


def brokers(env: dict[str, str]) -> tuple[int, list[tuple[str, str | None, str]]]:
    """``run.py brokers``: its exit status, and (endpoint, role, state) per broker."""
    shown = subprocess.run(python_argv("run.py", "brokers", "--json", "--timeout", "1"),
                           env=env, capture_output=True, text=True, timeout=60)
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    return shown.returncode, [(r["endpoint"], r.get("role"), r["state"]) for r in rows]
