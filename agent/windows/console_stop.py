"""Windows: the agent stops cleanly when its console is closed, at log-off and at shutdown.

Windows has no SIGTERM from outside. What it sends a console program are *console control
events*, to a handler registered with ``SetConsoleCtrlHandler``, called on a thread the
system creates:

- Ctrl-C and Ctrl-Break: Python's own handler turns them into SIGINT and SIGBREAK (the agent
  handles those signals like SIGTERM on Linux); this handler passes them on (returns FALSE).
- console closed, log-off, shutdown: the process is ended as soon as the handler returns
  (after 5 s anyway for a close, more at shutdown), so the handler asks the agent to stop,
  then waits for the main loop to have finished (the action in progress, the ledger closed)
  before returning.

A process that has loaded user32 (the desktop executor has; agent/windows/session_end.py's window
too) gets no log-off and shutdown events here, only a console close: its hidden window
(agent/windows/session_end.py) stops it at log-off and shutdown. Should it still be ended without
notice, nothing is lost: every action is marked started in the ledger before any input, so
the next start reports one that was cut ``indeterminate_after_restart`` and the replay pauses
for a person (docs/architecture.md, "The life of an action"). Wine never sends a console
close: why, and what covers it instead, docs/windows-stop.md.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any

CTRL_C_EVENT, CTRL_BREAK_EVENT, CTRL_CLOSE_EVENT = 0, 1, 2
CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT = 5, 6
EVENT_NAMES = {CTRL_CLOSE_EVENT: "console close", CTRL_LOGOFF_EVENT: "log-off",
               CTRL_SHUTDOWN_EVENT: "shutdown"}


class ConsoleStop:
    """``install()`` on Windows (a no-op elsewhere); ``stopped()`` once the agent is done.

    ``request_stop(reason)`` is called on the system's thread: it must only set a flag and
    wake the main loop.
    """

    def __init__(self, request_stop: Callable[[str], None], wait_s: float) -> None:
        self._request_stop = request_stop
        self._wait_s = wait_s
        self._done = threading.Event()
        self._handler: Any = None  # the ctypes callback: kept alive while installed

    def install(self) -> bool:
        """Register the handler; False when not on Windows or the call failed."""
        if sys.platform != "win32":
            return False
        from ctypes import wintypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        routine = ctypes.WINFUNCTYPE(wintypes.BOOL, wintypes.DWORD)
        self._handler = routine(self._on_event)
        return bool(kernel32.SetConsoleCtrlHandler(self._handler, True))

    def _on_event(self, event: int) -> bool:
        reason = EVENT_NAMES.get(event)
        if reason is None:
            return False  # Ctrl-C / Ctrl-Break: Python's handler raises SIGINT / SIGBREAK
        self._request_stop(reason)
        self._done.wait(self._wait_s)
        return True

    def stopped(self) -> None:
        """The agent has stopped: a waiting handler may let the system end the process."""
        self._done.set()
