"""Two servers for real (README, "Running on two servers"): hosts made of network namespaces
on one switch (tests/integration/netns.py). ``db`` runs PostgreSQL; ``a`` and ``b`` each run a
whole tree (``python run.py --config``) from the example files examples/two-servers/
server-a.toml (its broker the primary) and server-b.toml (the backup), as they are, only
their data folder and console moved; ``ws`` runs the agents, given both brokers
(workstation.toml). In the middle of replays server A's link goes down: work resumes
through B, every replay completes, every input is performed exactly once. Then A's link comes
back: A does not take over while B serves, both trees keep running, and new replays
complete.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import zmq

from agent.effects import read_effects
from messages.replay import (
    GetReplayStatus,
    ReplayStarted,
    ReplayStatusReply,
    StartReplay,
)
from messages.workflow import Workflow
from runtime.settings import Settings, load_settings
from tests.conftest import ROOT, Spawn, python_argv, wait_until
from tests.integration.broker_pair import PairWatch, broker_state
from tests.integration.netns import HostCluster, Hosts, OnHost, hosts
from tests.integration.system import FAST_WATCHDOG, clicks, workflow
from tests.postgres import pg_bin
from transport.client import CallFailed, SyncClient

EXAMPLES = ROOT / "examples" / "two-servers"
AGENTS = 3
STEPS = 60


def _host(endpoint: str) -> str:
    return endpoint.removeprefix("tcp://").rsplit(":", 1)[0]


def _config(name: str) -> Settings:
    return load_settings(EXAMPLES / f"{name}.toml")


class Workstation:
    """The test's hands on the workstation host: agents started there, calls made from there."""

    def __init__(self, spawn: Spawn, made: Hosts, tmp: Path, env: dict[str, str]) -> None:
        self.spawn, self.made, self.tmp, self.env = spawn, made, tmp, env
        self.on = OnHost(made, "ws")
        ws = _config("workstation")
        self.brokers = ws.mdp_endpoints
        self.ctx: zmq.Context[Any] = self.on.run(zmq.Context)
        self.client = self.on.run(lambda: SyncClient(list(self.brokers), self.ctx))

    def agent(self, machine_id: str) -> Path:
        """Start an agent (the real ``python -m agent``); its folder (effects, ledger)."""
        base = self.tmp / f"agent-{machine_id}"
        base.mkdir()
        (base / "scenario.json").write_text('{"default": {"delay_s": 0.05}}')
        argv = python_argv("-m", "agent", "--machine-id", machine_id, "--data-dir",
                           str(base / "data"), "--effects-log", str(base / "effects.jsonl"),
                           "--scenario", str(base / "scenario.json"))
        self.spawn(self.made.argv("ws", argv), env=self.env, name=f"agent-{machine_id}")
        return base

    def said(self, endpoint: str) -> dict[str, Any]:
        """What the broker at ``endpoint`` says of itself (``mmi.broker``); {} if silent."""
        return self.on.run(lambda: broker_state(endpoint, self.ctx)) or {}

    def state(self, endpoint: str) -> str | None:
        return self.said(endpoint).get("state")

    def served(self, service: str) -> bool:
        reply = self.on.run(lambda: self.client.raw("mmi.service", service.encode(),
                                                    timeout_s=1.0))
        return reply == [b"200"]

    def start(self, wf: Workflow, machine_id: str) -> str:
        reply = self.on.run(lambda: self.client.call("dispatcher", StartReplay(
            workflow=wf, machine_id=machine_id, mode="supervised"), timeout_s=5.0).body)
        assert isinstance(reply, ReplayStarted), reply
        return reply.replay_id

    def status(self, replay_id: str) -> str:
        reply = self.on.run(lambda: self.client.call(
            "dispatcher", GetReplayStatus(replay_id=replay_id), timeout_s=5.0).body)
        assert isinstance(reply, ReplayStatusReply), reply
        return reply.replays[0].status

    def wait_ready(self, machine_id: str) -> None:
        """Until the agent serves and a dispatcher answered its hello (a replay started
        from then on is not resent by that hello)."""
        wait_until(lambda: self.served(f"agent.{machine_id}"), timeout=60)
        wait_until(lambda: "dispatcher answered hello" in _log_of(self.tmp, f"agent-{machine_id}"),
                   timeout=30)

    def wait_completed(self, replay_id: str, timeout: float) -> None:
        def completed() -> bool:
            try:
                return self.status(replay_id) == "completed"
            except CallFailed:
                return False  # between two brokers, or a dispatcher restarting
        wait_until(completed, timeout=timeout)

    def close(self) -> None:
        self.on.run(self.client.close)
        self.on.run(lambda: self.ctx.destroy(linger=0))
        self.on.close()


def _effects(base: Path) -> list[str]:
    return [e["action_id"] for e in read_effects(base / "effects.jsonl")]


def _log_of(tmp: Path, name: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(tmp.glob(f"{name}-*.log")))


@pytest.fixture
def network() -> Iterator[Hosts]:
    addresses = {"a": _host(_config("server-a").mdp_endpoint),
                 "b": _host(_config("server-b").mdp_endpoint),
                 "db": _host(_config("server-a").database_url.split("@", 1)[1].split("/")[0]),
                 "ws": "192.0.2.31"}
    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (scripts/test installs it)")
    with hosts(addresses) as made:
        yield made


def test_server_a_cut_off_during_replays(spawn: Spawn, network: Hosts,
                                         tmp_path: Path) -> None:
    db = HostCluster(tmp_path, network, "db")
    try:
        db.start()
        with psycopg.connect(db.url(), autocommit=True) as conn:
            conn.execute(b'CREATE DATABASE "lea"')
        _run(spawn, network, tmp_path)
    finally:
        db.close()


def _run(spawn: Spawn, made: Hosts, tmp: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEA_")}
    base.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    ws = Workstation(spawn, made, tmp,
                     {**base, "LEA_CONFIG": str(EXAMPLES / "workstation.toml")})
    a, b = ws.brokers
    trees, envs = {}, {}
    for host, name in (("a", "server-a"), ("b", "server-b")):
        # As the example files say, but for the data folder (the hosts share one disk here),
        # no console, the tests' quick watchdog and patience with a loaded machine's start.
        env = {**base, **FAST_WATCHDOG, "LEA_DATA_DIR": str(tmp / f"var-{host}"),
               "LEA_CONSOLE_PORT": "0", "LEA_BEACON_TIMEOUT_S": "30",
               "LEA_RESTART_INTENSITY": "50"}
        argv = [sys.executable, "run.py", "--config", str(EXAMPLES / f"{name}.toml")]
        trees[host] = spawn(made.argv(host, argv), env=env, name=f"tree-{host}")
        envs[host] = env
        if host == "a":  # one tree starting at a time: a loaded machine starts them sooner
            wait_until(lambda: ws.state(a) is not None, timeout=90)
    watch: PairWatch | None = None
    try:
        wait_until(lambda: ws.state(a) == "active" and ws.state(b) == "passive", timeout=90)
        wait_until(lambda: ws.served("dispatcher"), timeout=60)
        watch = ws.on.run(lambda: PairWatch(a, b))
        agents = {f"w{i}": ws.agent(f"w{i}") for i in range(AGENTS)}
        for machine_id in agents:
            ws.wait_ready(machine_id)
        wf = workflow(*clicks(STEPS))
        replays = {m: ws.start(wf, m) for m in agents}

        def done_at_least(n: int) -> bool:
            return all(len(_effects(f)) >= min(n, STEPS) for f in agents.values())

        # Server A's cable is pulled mid-replay: B takes over, the work goes on through it.
        wait_until(lambda: done_at_least(5), timeout=60)
        made.cut("a")
        wait_until(lambda: ws.state(b) == "active", timeout=30)
        progress = min(len(_effects(f)) for f in agents.values())
        wait_until(lambda: done_at_least(progress + 5), timeout=60)
        for replay_id in replays.values():
            ws.wait_completed(replay_id, timeout=120)
        expected = [action.action_id for action in wf.actions]
        for machine_id, folder in agents.items():
            assert _effects(folder) == expected, f"not exactly once on {machine_id}"

        # A's cable is back: it hears B serving and does not take over; both trees run on.
        made.mend("a")
        wait_until(lambda: ws.said(a).get("peer_state") == "active", timeout=30)
        assert ws.state(a) == "passive" and ws.state(b) == "active"
        again = workflow(*clicks(10), workflow_id="after")
        more = {m: ws.start(again, m) for m in agents}
        for replay_id in more.values():
            ws.wait_completed(replay_id, timeout=60)
        assert ws.state(a) == "passive" and ws.state(b) == "active"
        after = expected + [action.action_id for action in again.actions]
        for machine_id, folder in agents.items():
            assert _effects(folder) == after, f"not exactly once on {machine_id} after A's return"
        assert all(tree.poll() is None for tree in trees.values()), "a tree stopped"
        # The audit trail both servers wrote in PostgreSQL verifies, from each server (the
        # chain there, and that server's own anchor in its data folder).
        for host, name in (("a", "server-a"), ("b", "server-b")):
            argv = [sys.executable, "run.py", "--config", str(EXAMPLES / f"{name}.toml"),
                    "audit", "verify"]
            done = subprocess.run(made.argv(host, argv), env=envs[host], cwd=ROOT, text=True,
                                  capture_output=True, timeout=120, check=False)
            assert done.returncode == 0, done.stdout + done.stderr
    finally:
        if watch is not None:
            watch.close()
        ws.close()
    assert watch.both == [], f"two active brokers: {watch.both[:3]}"
    assert "active" in watch.seen[a] and "active" in watch.seen[b], watch.seen

