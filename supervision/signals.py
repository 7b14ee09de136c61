"""The supervisor's signal handling: every signal it cares about wakes its selector.

``signal.set_wakeup_fd`` writes the signal number to a pipe the supervisor's loop watches, so
a child's exit (SIGCHLD) or a stop request (SIGTERM, SIGINT, SIGHUP) ends its sleep at once.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def install(wakeup_fd: int, on_stop: Callable[[int], None]) -> dict[int, Any]:
    """Route SIGCHLD and the stop signals to ``wakeup_fd`` (``on_stop(signum)`` for the
    latter); the previous handlers, for :func:`restore`. Main thread only."""
    def stopped(signum: int, _frame: FrameType | None) -> None:
        on_stop(signum)

    def on_child(_signum: int, _frame: FrameType | None) -> None:
        pass  # only here so that SIGCHLD writes to the wakeup fd

    # Wakeup fd first, so that no signal between the two steps goes unnoticed.
    previous: dict[int, Any] = {0: signal.set_wakeup_fd(wakeup_fd, warn_on_full_buffer=False)}
    previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, on_child)
    for signum in STOP_SIGNALS:
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue  # started under nohup: respect it
        previous[signum] = signal.signal(signum, stopped)
    return previous


def restore(previous: dict[int, Any]) -> None:
    """Put back what :func:`install` replaced."""
    for signum, handler in previous.items():
        if signum != 0 and handler is not None:
            signal.signal(signum, handler)
    signal.set_wakeup_fd(previous[0])
