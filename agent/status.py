"""What the agent is doing, for the people who look after the workstation (docs/operations.md).

The running agent keeps ``status.json`` in its data folder: its pid, its server link, its
monitors, its last action (ids, type and outcome: never typed text or a pause's message).
Written when it changes and at least every :data:`REFRESH_S`, by replacing the file whole.
``lea-agent status`` (``python -m agent status``) reads it and says, in a few lines, whether
the agent runs, whether it hears its server, which monitors it sees and what it last did;
its exit code is 0 when the agent runs and hears its broker, 1 when it runs without a
server link, 3 when it does not run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from runtime.settings import Settings

STATUS_FILE = "status.json"
REFRESH_S = 10.0
STALE_S = 3 * REFRESH_S
"""A status older than this, of a process still there: the agent is stuck."""
RUNNING, NO_LINK, NOT_RUNNING = 0, 1, 3


def default_data_dir(settings: Settings, machine_id: str) -> Path:
    """The agent's data folder when ``--data-dir`` is not given."""
    return settings.data_dir / f"agent-{machine_id}"


def log_file(data_dir: Path) -> Path:
    """The agent's rotating log file, in its data folder (runtime/logs.py)."""
    return data_dir / "logs" / "agent.log"


class StatusFile:
    """The agent's side: :meth:`update` from the main loop, every turn."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / STATUS_FILE
        self._last: dict[str, Any] | None = None
        self._written_at = 0.0

    def update(self, state: dict[str, Any], now: float) -> None:
        if state == self._last and now - self._written_at < REFRESH_S:
            return
        self._last, self._written_at = state, now
        tmp = self.path.with_name(STATUS_FILE + ".tmp")
        try:
            tmp.write_text(json.dumps({**state, "updated_at": time.time()}), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass  # the status is a convenience: never a reason to stop serving


def read(data_dir: Path) -> dict[str, Any] | None:
    try:
        status = json.loads((data_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def process_exists(pid: int) -> bool:
    """Whether process ``pid`` is alive (Windows: OpenProcess and its exit code)."""
    if sys.platform == "win32":
        import ctypes

        kernel32 = ctypes.WinDLL("kernel32")  # type: ignore[attr-defined,unused-ignore]
        kernel32.OpenProcess.restype = ctypes.c_void_p
        handle = kernel32.OpenProcess(0x1000, False, pid)  # QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        kernel32.GetExitCodeProcess(ctypes.c_void_p(handle), ctypes.byref(code))
        kernel32.CloseHandle(ctypes.c_void_p(handle))
        return code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _when(at: float | None) -> str:
    return "never" if at is None else datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


def describe(status: dict[str, Any] | None, alive: bool, now: float,
             data_dir: Path) -> tuple[int, list[str]]:
    """``(exit code, lines)`` for ``lea-agent status`` (pure: ``alive`` is whether the pid of
    ``status`` exists, ``now`` the wall clock)."""
    if status is None:
        return NOT_RUNNING, [f"agent: not running (no status in {data_dir})"]
    name = status.get("service", "agent")
    if not alive:
        return NOT_RUNNING, [f"{name}: not running (pid {status.get('pid')} gone; last status"
                             f" {_when(status.get('updated_at'))})"]
    age = now - float(status.get("updated_at", 0))
    lines = [f"{name}: running (pid {status.get('pid')}, since"
             f" {_when(status.get('started_at'))}, executor {status.get('executor')})"]
    if age > STALE_S:
        lines.append(f"  WARNING: no status for {age:.0f} s: the agent may be stuck")
    link = status.get("link", {})
    linked = bool(link.get("broker_heard"))
    lines.append(f"server link: {'connected to' if linked else 'NOT hearing'}"
                 f" {link.get('endpoint')} (endpoints {', '.join(link.get('endpoints', []))};"
                 f" {link.get('transport', 'tcp')}); dispatcher answered hello:"
                 f" {_when(link.get('hello_answered_at'))}; monitor_router takes heartbeats:"
                 f" {'yes' if link.get('router_answering') else 'no'}")
    monitors = status.get("monitors") or []
    lines.append(f"monitors: {len(monitors)}" + "".join(
        f"\n  {m.get('idx')}: {m.get('w')}x{m.get('h')} at ({m.get('x')}, {m.get('y')})"
        f"{' primary' if m.get('primary') else ''} {m.get('name') or ''}".rstrip()
        for m in monitors))
    if status.get("display_scaling"):
        lines.append(str(status["display_scaling"]))
    last = status.get("last_action")
    lines.append("last action: none since start" if not last else
                 f"last action: {last.get('action_id')} ({last.get('type')}) of replay"
                 f" {last.get('replay_id')}: {last.get('outcome')} at {_when(last.get('at'))}")
    if status.get("log_file"):
        lines.append(f"log: {status['log_file']}")
    return (RUNNING if linked and age <= STALE_S else NO_LINK), lines


def main(data_dir: Path) -> int:
    """Print the status of the agent whose data folder is ``data_dir``."""
    status = read(data_dir)
    alive = status is not None and isinstance(status.get("pid"), int) and process_exists(
        status["pid"])
    code, lines = describe(status, alive, time.time(), data_dir)
    with contextlib.suppress(AttributeError, OSError):  # pythonw: no stdout
        print("\n".join(lines), flush=True)
    return code
