"""Heartbeats from a child to its supervisor, over a private pipe (not through the broker).

The broker is itself a supervised child and may be down, so liveness cannot travel on the bus.
Each child gets the write end of its own ``os.pipe`` (``pass_fds``) and its number in
``LEA_BEACON_FD``; the supervisor reads the other end.

Child side::

    beacon = Beacon.from_env()      # a no-op beacon when not supervised
    while running:
        beacon.beat()               # every iteration of the MAIN loop, never from a thread
        ...

Beating from the main loop is the point: a loop stuck in a call, a deadlock, or a SIGSTOP'd
process stops beating, and the supervisor kills and restarts it. A thread would keep beating
for a dead loop.

This module imports only the standard library: every child imports it at start-up.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from collections.abc import Mapping

if sys.platform != "win32":
    import fcntl

BEACON_FD_ENV = "LEA_BEACON_FD"
BEAT_INTERVAL_S = 0.25
"""A child writes at most one byte per interval, however often it calls :meth:`Beacon.beat`."""


class Beacon:
    """The child's end: :meth:`beat` is cheap enough to call on every loop iteration.

    It never blocks and never raises: a full pipe drops the beat (the supervisor is behind and
    already has unread beats), a closed one (the supervisor is gone) turns the beacon into a
    no-op. Python ignores SIGPIPE, so a dead reader surfaces as EPIPE, not as a fatal signal.
    """

    __slots__ = ("_fd", "_interval", "_next")

    def __init__(self, fd: int | None, interval_s: float = BEAT_INTERVAL_S) -> None:
        self._fd = fd
        self._interval = interval_s
        self._next = 0.0  # first beat() writes at once: the supervisor learns we are up
        if fd is not None and sys.platform != "win32":
            os.set_blocking(fd, False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Beacon:
        """The beacon named by ``LEA_BEACON_FD``, or a no-op one.

        No-op too when the variable does not name the write end of a pipe: a grandchild that
        inherited the variable but not the fd must not scribble on an unrelated file that
        happens to have that number.
        """
        raw = (os.environ if environ is None else environ).get(BEACON_FD_ENV)
        if not raw or not _pipe_write_end(raw):
            return cls(None)
        return cls(int(raw))

    @property
    def active(self) -> bool:
        """Whether beats go anywhere (False when unsupervised or the supervisor is gone)."""
        return self._fd is not None

    def beat(self) -> None:
        """Tell the supervisor this process is alive; rate-limited, never blocks or raises."""
        if self._fd is None:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._interval
        try:
            os.write(self._fd, b".")
        except BlockingIOError:
            pass  # pipe full: the supervisor has plenty of unread beats already
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.EBADF):
                self._disable()  # nobody listens any more; stop paying for syscalls
            # Anything else is dropped too: a heartbeat must never kill its process.

    def _disable(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _pipe_write_end(raw: str) -> bool:
    """Whether ``raw`` is the number of a pipe's write end. Never on Windows: the
    supervisor hands the pipe with POSIX ``pass_fds``, and runs on Linux only."""
    if sys.platform == "win32":
        return False
    else:  # the else, not a fall-through, keeps fcntl out of mypy --platform win32
        try:
            fd = int(raw)
            mode = os.fstat(fd).st_mode
            access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except (ValueError, OSError):
            return False
        return stat.S_ISFIFO(mode) and access == os.O_WRONLY


class BeaconPipe:
    """The supervisor's end for one child process (a new pipe for every start).

    Create it, pass :attr:`write_fd` with ``pass_fds`` and :meth:`child_env` in the
    environment, call :meth:`close_write_end` once the child is spawned (else EOF would never
    come), then :meth:`drain` whenever :attr:`read_fd` is readable.
    """

    def __init__(self) -> None:
        # os.pipe() fds are non-inheritable: only the child given write_fd in pass_fds gets it.
        self.read_fd, self.write_fd = os.pipe()
        if sys.platform != "win32":  # the supervisor side runs on POSIX only (pass_fds)
            os.set_blocking(self.read_fd, False)
        self.last_beat: float | None = None
        self.beats = 0
        self.eof = False
        self._write_open = True
        self._read_open = True

    def child_env(self) -> dict[str, str]:
        return {BEACON_FD_ENV: str(self.write_fd)}

    def close_write_end(self) -> None:
        if self._write_open:
            self._write_open = False
            os.close(self.write_fd)

    def drain(self, now: float) -> bool:
        """Read all pending beats, stamping them ``now``; False once EOF is reached.

        EOF means every copy of the write end is closed: the child exited (or closed it).
        The caller must then stop watching :attr:`read_fd`, or it would stay readable forever.
        """
        if self.eof or not self._read_open:
            return False
        while True:
            try:
                data = os.read(self.read_fd, 4096)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            if not data:
                self.eof = True
                return False
            self.beats += len(data)
            self.last_beat = now

    def deadline(self, timeout_s: float, started_at: float, grace_s: float) -> float:
        """When the child is hung if no beat arrives: ``timeout_s`` after the last beat, or
        ``max(grace_s, timeout_s)`` after ``started_at`` while it has not beaten yet."""
        if self.last_beat is None:
            return started_at + max(grace_s, timeout_s)
        return self.last_beat + timeout_s

    def close(self) -> None:
        self.close_write_end()
        if self._read_open:
            self._read_open = False
            os.close(self.read_fd)
