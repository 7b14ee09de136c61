"""A whole system for integration tests: `python run.py` (broker + six actors under the
supervisor), simulated agents as separate processes, and a control client.

Everything is a real process; tests kill, freeze and restart them with real signals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors import ACTORS
from agent.effects import read_effects
from cli.ping import service_pid
from messages.base import Message
from messages.dispatch import InFlight, InFlightList, ListInFlight
from messages.replay import (
    GetReplayStatus,
    Mode,
    ReplayStarted,
    ReplayStatusReply,
    ReplaySummary,
    StartReplay,
)
from messages.workflow import Workflow
from runtime.settings import Settings
from supervision.tree import child_pid
from tests.conftest import Spawn, python_argv, wait_until
from transport.client import CallFailed, SyncClient

# Fast watchdog for tests: scan twice a second, orphan after 3 s.
FAST_WATCHDOG = {
    "RPA_WATCHDOG_SCAN_INTERVAL_S": "0.5",
    "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "3",
}


def tree_door(env: dict[str, str]) -> str:
    """The tree's own door of the tree ``env`` describes (runtime/settings.py)."""
    return env.get("LEA_TREE_ENDPOINT") or Settings(
        data_dir=Path(env["LEA_DATA_DIR"])).tree_mdp_endpoint


def control_door(env: dict[str, str]) -> str:
    """The people's door of the tree ``env`` describes (broker/control_door.py)."""
    return env.get("LEA_CONTROL_ENDPOINT") or Settings(
        data_dir=Path(env["LEA_DATA_DIR"])).control_mdp_endpoint


def workflow(*actions: dict[str, Any], workflow_id: str = "wf") -> Workflow:
    """A workflow from action dicts; ``action_id`` defaults to ``s<i>``."""
    return Workflow.model_validate({
        "workflow_id": workflow_id,
        "actions": [{"action_id": f"s{i}", **a} for i, a in enumerate(actions)],
    })


def clicks(n: int, **extra: Any) -> list[dict[str, Any]]:
    """``n`` clicks on different spots, as a recorded workflow has (the same click three
    times in a row is the loop detector's ``action_repeat``)."""
    return [{"type": "click", "target_spec": {"x_pct": 0.5, "y_pct": round(0.05 + 0.9 * (
        i % 97) / 97, 4)}, **extra} for i in range(n)]


class Agent:
    """One simulated agent process (``python -m agent``), restartable on the same data dir."""

    def __init__(self, system: System, machine_id: str, scenario: dict[str, Any] | None,
                 extra_env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None, data_dir: Path | None = None) -> None:
        self.extra_args = list(extra_args or [])  # more agent flags (--ssh, --curve...)
        self.system = system
        self.machine_id = machine_id
        base = system.tmp / f"agent-{machine_id}"
        base.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir or base / "data"  # its disk (the effects log: the world)
        self.effects_path = base / "effects.jsonl"
        self.scenario_path: Path | None = None
        if scenario is not None:
            self.scenario_path = base / "scenario.json"
            self.scenario_path.write_text(json.dumps(scenario))
        self.env = dict(system.env, **(extra_env or {}))
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        argv = ["-m", "agent", "--machine-id", self.machine_id, "--data-dir",
                str(self.data_dir), "--effects-log", str(self.effects_path)]
        if self.scenario_path is not None:
            argv += ["--scenario", str(self.scenario_path)]
        argv += self.extra_args
        self.proc = self.system.spawn(python_argv(*argv), env=self.env,
                                      name=f"agent-{self.machine_id}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def effects(self) -> list[dict[str, Any]]:
        """Every input the agent performed (one JSON line each, fsynced)."""
        return read_effects(self.effects_path) if self.effects_path.exists() else []

    def executed(self, action_id: str) -> int:
        return sum(1 for e in self.effects() if e["action_id"] == action_id)


class System:
    """The tree plus agents; ``call`` talks to any service through the broker."""

    def __init__(self, spawn: Spawn, env: dict[str, str], tmp: Path,
                 extra_env: dict[str, str] | None = None, ready_timeout: float = 60.0) -> None:
        self.spawn = spawn
        self.tmp = tmp
        # extra_env last: it may override the defaults above (the restart intensity...).
        self.env = {**env, **FAST_WATCHDOG, "LEA_RESTART_INTENSITY": "50",
                    **(extra_env or {})}
        self.tree = spawn(python_argv("run.py"), env=self.env, name="tree")
        # As the tree's own processes call (the console's door): the tests speak for the
        # tree; what other callers may do is tested through their own doors.
        self.client = SyncClient(tree_door(self.env))
        ready: set[str] = set()

        def all_ready() -> bool:
            ready.update(name for name in ACTORS if name not in ready and self.pid(name))
            return len(ready) == len(ACTORS)

        try:
            wait_until(all_ready, timeout=ready_timeout)
        except pytest.fail.Exception:
            missing = sorted(set(ACTORS) - ready)
            pytest.fail(f"the tree did not serve within {ready_timeout}s: no answer from "
                        f"{', '.join(missing)} (their logs are the tree's, below)")

    # Processes -------------------------------------------------------------------------------

    def pid(self, service: str) -> int | None:
        return service_pid(self.client, service, 0.5)

    def child_pid(self, name: str) -> int:
        """The pid of the supervisor's child ``name`` (``broker`` or an actor)."""
        pid = child_pid(self.tree.pid, name)
        if pid is None:
            raise LookupError(name)
        return pid

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to a child of the tree; returns its pid."""
        pid = self.child_pid(name)
        os.kill(pid, sig)
        return pid

    def agent(self, machine_id: str, scenario: dict[str, Any] | None = None,
              extra_env: dict[str, str] | None = None,
              extra_args: list[str] | None = None, data_dir: Path | None = None) -> Agent:
        return Agent(self, machine_id, scenario, extra_env, extra_args, data_dir)

    # Control ---------------------------------------------------------------------------------

    def call(self, service: str, message: Message, timeout_s: float = 5.0) -> Message:
        return self.client.call(service, message, timeout_s=timeout_s).body

    def start(self, wf: Workflow, machine_id: str, mode: Mode = "supervised",
              session_id: str | None = None) -> str:
        reply = self.call("dispatcher", StartReplay(workflow=wf, machine_id=machine_id,
                                                    mode=mode,
                                                    session_id=session_id))
        assert isinstance(reply, ReplayStarted), reply
        return reply.replay_id

    def status(self, replay_id: str) -> ReplaySummary:
        reply = self.call("dispatcher", GetReplayStatus(replay_id=replay_id))
        assert isinstance(reply, ReplayStatusReply), reply
        return reply.replays[0]

    def wait_status(self, replay_id: str, *statuses: str, timeout: float = 60.0,
                    where: Callable[[ReplaySummary], bool] | None = None) -> ReplaySummary:
        """Wait until the replay is in one of ``statuses`` (and ``where`` holds)."""
        def reached() -> ReplaySummary | None:
            try:
                s = self.status(replay_id)
            except CallFailed:
                return None  # the dispatcher may be restarting
            ok = s.status in statuses and (where is None or where(s))
            return s if ok else None

        result = wait_until(reached, timeout=timeout)
        assert isinstance(result, ReplaySummary)
        return result

    def inflight(self) -> InFlightList:
        reply = self.call("dispatcher", ListInFlight())
        assert isinstance(reply, InFlightList)
        return reply

    def inflight_of(self, replay_id: str) -> InFlight | None:
        """The replay's action in flight now, if any."""
        return next((e for e in self.inflight().entries if e.replay_id == replay_id), None)

    def wait_inflight(self, replay_id: str, timeout: float = 10.0) -> InFlight:
        """The replay's action in flight, once dispatched (a dispatch first waits for the
        monitor router's answer)."""
        entry = wait_until(lambda: self.inflight_of(replay_id), timeout=timeout)
        assert isinstance(entry, InFlight)
        return entry
