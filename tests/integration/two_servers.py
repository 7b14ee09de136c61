"""Two servers on one machine, for the two-server test and bench: the hosts of
examples/two-servers/ as network namespaces (tests/integration/netns.py) on one switch;
PostgreSQL on ``db``; each server's whole tree (``python run.py --config``) on ``a`` and
``b`` from the example files as they are (only the data folder moved, no console, the tests'
quick watchdog); agents and the calls of the test or bench on ``ws``
(docs/two-servers.md, "Running on two servers")."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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
from tests.conftest import ROOT, python_argv, wait_until
from tests.integration.broker_pair import broker_state
from tests.integration.netns import HostCluster, Hosts, OnHost, hosts
from tests.integration.system import FAST_WATCHDOG, control_door
from tests.postgres import pg_bin
from transport.client import CallFailed, SyncClient

EXAMPLES = ROOT / "examples" / "two-servers"
SERVERS = {"a": "server-a", "b": "server-b"}
WORKSTATION_ADDRESS = "192.0.2.31"
Spawn = Callable[..., "subprocess.Popen[bytes]"]  # spawn(argv, env=..., name=...)


def example(name: str) -> Settings:
    """The settings of an example file (``server-a``, ``server-b``, ``workstation``)."""
    return load_settings(EXAMPLES / f"{name}.toml")


def host_of(endpoint: str) -> str:
    """The address of ``tcp://ADDRESS:PORT`` (or of ``USER@ADDRESS:PORT``)."""
    return endpoint.removeprefix("tcp://").rsplit("@", 1)[-1].rsplit(":", 1)[0]


def addresses() -> dict[str, str]:
    """Each host's address, as the example files give them."""
    a = example("server-a")
    return {"a": host_of(a.mdp_endpoint), "b": host_of(example("server-b").mdp_endpoint),
            "db": host_of(a.database_url.split("/")[2]), "ws": WORKSTATION_ADDRESS}


class Workstation:
    """The test's hands on the workstation host: agents started there, calls made from there."""

    def __init__(self, spawn: Spawn, made: Hosts, tmp: Path, env: dict[str, str]) -> None:
        self.spawn, self.made, self.tmp, self.env = spawn, made, tmp, env
        self.on = OnHost(made, "ws")
        ws = example("workstation")
        self.brokers = ws.mdp_endpoints
        self.ctx: zmq.Context[Any] = self.on.run(zmq.Context)
        self.client = self.on.run(lambda: SyncClient(list(self.brokers), self.ctx))
        self.doors: SyncClient | None = None  # the servers' people's doors, once started

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
        # A person starts replays on a server (its people's door), not from a workstation.
        assert self.doors is not None, "the servers are not started"
        reply = self.doors.call("dispatcher", StartReplay(
            workflow=wf, machine_id=machine_id, mode="supervised"), timeout_s=5.0).body
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
        wait_until(lambda: "dispatcher answered hello" in log_of(self.tmp, f"agent-{machine_id}"),
                   timeout=30)

    def wait_completed(self, replay_id: str, timeout: float) -> None:
        def completed() -> bool:
            try:
                return self.status(replay_id) == "completed"
            except CallFailed:
                return False  # between two brokers, or a dispatcher restarting
        wait_until(completed, timeout=timeout)

    def close(self) -> None:
        if self.doors is not None:
            self.doors.close()
        self.on.run(self.client.close)
        self.on.run(lambda: self.ctx.destroy(linger=0))
        self.on.close()


def effects(base: Path) -> list[str]:
    """The action ids of the inputs the agent at ``base`` performed, in order."""
    return [e["action_id"] for e in read_effects(base / "effects.jsonl")]


def log_of(tmp: Path, name: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(tmp.glob(f"{name}-*.log")))


@dataclass
class TwoServers:
    """What :func:`two_servers` built: the hosts, the trees, the workstation's hands."""

    made: Hosts
    ws: Workstation
    trees: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)

    def run(self, host: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``python run.py --config <its example> ARGS`` on server ``host``."""
        argv = [sys.executable, "run.py", "--config", str(EXAMPLES / f"{SERVERS[host]}.toml"),
                *args]
        return subprocess.run(self.made.argv(host, argv), env=self.envs[host], cwd=ROOT,
                              text=True, capture_output=True, timeout=timeout, check=False)


@contextlib.contextmanager
def two_servers(spawn: Spawn, tmp: Path, extra_env: dict[str, str] | None = None
                ) -> Iterator[TwoServers]:
    """The four hosts, PostgreSQL, both trees serving (A active, B passive); everything
    stopped and deleted on exit."""
    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (scripts/test installs it)")
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEA_")}
    base.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **(extra_env or {}))
    with hosts(addresses()) as made:
        db = HostCluster(tmp, made, "db")
        try:
            db.start()
            with psycopg.connect(db.url(), autocommit=True) as conn:
                conn.execute(b'CREATE DATABASE "lea"')
            ws = Workstation(spawn, made, tmp,
                             {**base, "LEA_CONFIG": str(EXAMPLES / "workstation.toml")})
            try:
                servers = TwoServers(made, ws)
                _start_trees(servers, spawn, tmp, base)
                yield servers
            finally:
                ws.close()
        finally:
            db.close()


def _start_trees(servers: TwoServers, spawn: Spawn, tmp: Path, base: dict[str, str]) -> None:
    a, b = servers.ws.brokers
    for host, name in SERVERS.items():
        # No console, the tests' quick watchdog, patience with a loaded machine's start;
        # the restart intensity is the default's (a server cut off restarts its dispatcher).
        env = {**base, **FAST_WATCHDOG, "LEA_DATA_DIR": str(tmp / f"var-{host}"),
               "LEA_CONSOLE_PORT": "0", "LEA_BEACON_TIMEOUT_S": "30",
               # One trail, one keyring: each server reads the images the other sealed
               # (docs/operations.md, "Screenshots encrypted at rest").
               "LEA_IMAGE_KEYRING": str(tmp / "image-keys.json")}
        argv = [sys.executable, "run.py", "--config", str(EXAMPLES / f"{name}.toml")]
        servers.trees[host] = spawn(servers.made.argv(host, argv), env=env, name=f"tree-{host}")
        servers.envs[host] = env
        if host == "a":  # one tree starting at a time: a loaded machine starts them sooner
            wait_until(lambda: servers.ws.state(a) is not None, timeout=90)
    servers.ws.doors = SyncClient([control_door(servers.envs[host]) for host in SERVERS])
    wait_until(lambda: servers.ws.state(a) == "active" and servers.ws.state(b) == "passive",
               timeout=90)
    wait_until(lambda: servers.ws.served("dispatcher"), timeout=60)
