"""The poll loop every actor and the agent run on: sockets, timers, wake-ups, the liveness
beacon and the stop signals, in one thread.

A turn polls every watched socket until the earliest deadline any part of the process has
(a worker's heartbeat, a request's timeout, a timer) but no longer than ``wait_s``, calls
the handlers of the readable ones, then each per-turn hook with the time, in the order they
were added, then beats the supervisor's beacon (runtime/liveness.py: from the loop, never from
a thread, so a stuck loop stops beating).

The loop runs on Windows too (the agent): it wakes on a socket pair, not a pipe, because zmq
can poll sockets only there and ``signal.set_wakeup_fd`` takes only a socket there.
"""

from __future__ import annotations

import heapq
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, Protocol

import zmq
from loguru import logger

from runtime.liveness import Beacon

WAIT_S = 0.25
"""The longest a poll waits with nothing due: the pace of the hooks and the beacon."""

Pollable = zmq.Socket[bytes] | int
"""A zmq socket, or the file descriptor (Windows: the socket handle) of a plain socket."""
OnReady = Callable[[Collection[Pollable]], None]
"""Called with the readable ones among a watch's sockets (never with none)."""


class Ticking(Protocol):
    """A part that has timeouts of its own: MDP workers and clients, the agent's outbox."""

    def tick(self, now: float) -> None: ...

    def next_deadline(self) -> float | None: ...


class Timers:
    """Callbacks every so many seconds, run by :meth:`tick` when due."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._heap: list[tuple[float, int, float, Callable[[float], None]]] = []

    def every(self, interval_s: float, callback: Callable[[float], None]) -> None:
        """Call ``callback(now)`` every ``interval_s`` seconds, the first in ``interval_s``."""
        heapq.heappush(self._heap, (time.monotonic() + interval_s, len(self._heap),
                                    interval_s, callback))

    def tick(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            _due, seq, interval, callback = heapq.heappop(self._heap)
            try:
                callback(now)
            except Exception:
                logger.exception("{}: timer failed", self.name)
            heapq.heappush(self._heap, (now + interval, seq, interval, callback))

    def next_deadline(self) -> float | None:
        return self._heap[0][0] if self._heap else None


class PollLoop:
    """One thread's poll loop: :meth:`watch` sockets, :meth:`add` parts with timeouts,
    :meth:`each_turn` hooks, then :meth:`run` until :meth:`stop`."""

    def __init__(self, name: str, wait_s: float = WAIT_S) -> None:
        self.name = name
        self.wait_s = wait_s
        self.stopping = False
        self.beacon = Beacon.from_env()
        self._watches: list[tuple[Callable[[], Sequence[Pollable]], OnReady]] = []
        self._deadlines: list[Callable[[], float | None]] = []
        self._hooks: list[Callable[[float], None]] = []
        self._poller = zmq.Poller()
        self._polled: tuple[Pollable, ...] | None = None
        # Wakes the poll from another thread and on a signal (set_wakeup_fd). Never closed:
        # a thread still running may write to it, and a closed fd number could by then name
        # another file.
        self._wake_r, self._wake_w = socket.socketpair()
        for sock in (self._wake_r, self._wake_w):
            sock.setblocking(False)

    # Set-up ---------------------------------------------------------------------------------

    def watch(self, sockets: Callable[[], Sequence[Pollable]], on_ready: OnReady) -> None:
        """Poll ``sockets()`` (asked every turn: a reconnection brings new ones); call
        ``on_ready(the readable ones)`` when any is readable."""
        self._watches.append((sockets, on_ready))

    def deadline(self, next_deadline: Callable[[], float | None]) -> None:
        """Let no poll wait past ``next_deadline()`` (a monotonic time, or None)."""
        self._deadlines.append(next_deadline)

    def each_turn(self, hook: Callable[[float], None]) -> None:
        """Call ``hook(now)`` at every turn, after the readable sockets are handled."""
        self._hooks.append(hook)

    def add(self, part: Ticking) -> None:
        """Tick ``part`` at every turn, and wake for its next deadline."""
        self.deadline(part.next_deadline)
        self.each_turn(part.tick)

    # From anywhere --------------------------------------------------------------------------

    def wake(self) -> None:
        """Make the poll return now (from any thread)."""
        try:
            self._wake_w.send(b"w")
        except BlockingIOError:
            pass  # a wake-up is already pending
        except OSError:
            logger.exception("{}: cannot wake the loop", self.name)

    def stop(self, reason: str | None = None) -> None:
        """End :meth:`run` (once its ``linger`` allows); ``reason`` is logged."""
        if reason is not None:
            logger.info("{}: got {}, stopping", self.name, reason)
        self.stopping = True
        self.wake()

    @contextmanager
    def signals(self, on_signal: Callable[[str], None] | None = None) -> Iterator[None]:
        """In the main thread: SIGTERM, SIGINT (and Ctrl-Break on Windows) call
        ``on_signal(name)`` (default: :meth:`stop`), and wake the poll at once.

        The handlers stay after the block: a second signal while the process closes down
        must not kill it half-way. Elsewhere than the main thread, nothing is installed.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handle = on_signal or self.stop

        def handler(signum: int, _frame: FrameType | None) -> None:
            handle(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        if sys.platform == "win32":
            signal.signal(signal.SIGBREAK, handler)  # Ctrl-Break
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        try:
            yield
        finally:
            signal.set_wakeup_fd(-1)

    # Running --------------------------------------------------------------------------------

    def run(self, linger: Callable[[], bool] | None = None) -> None:
        """Turn until :meth:`stop`; past it, go on while ``linger()`` says so."""
        while not (self.stopping and (linger is None or not linger())):
            self.turn()

    def turn(self) -> None:
        """Poll once, handle what is readable, run the hooks, beat."""
        groups = [tuple(sockets()) for sockets, _on_ready in self._watches]
        polled = (*(sock for group in groups for sock in group), self._wake_r.fileno())
        if polled != self._polled:
            self._poller, self._polled = zmq.Poller(), polled
            for sock in polled:
                self._poller.register(sock, zmq.POLLIN)
        ready: dict[Any, int] = dict(self._poller.poll(self._timeout_ms(time.monotonic())))
        if ready:
            for group, (_sockets, on_ready) in zip(groups, self._watches, strict=True):
                readable = [sock for sock in group if sock in ready]
                if readable:
                    on_ready(readable)
            if self._wake_r.fileno() in ready:
                _drain(self._wake_r)
        now = time.monotonic()
        for hook in self._hooks:
            hook(now)
        self.beacon.beat()

    def _timeout_ms(self, now: float) -> int:
        soonest = now + self.wait_s
        for next_deadline in self._deadlines:
            due = next_deadline()
            if due is not None and due < soonest:
                soonest = due
        return max(0, int((soonest - now) * 1000) + 1)


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except BlockingIOError:
        pass
