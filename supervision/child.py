"""One supervised OS process: its spec, its current incarnation, its heartbeat pipe.

Process-group choice: every child is the leader of its own process group
(``process_group=0``), and signals are sent to that group.

- A Ctrl-C in the terminal reaches the foreground group only, i.e. the supervisor, which
  then stops the children itself, one at a time in reverse start order. Sharing its group,
  every child would get the SIGINT at once, in no order.
- Signalling the group also reaches whatever the child spawned, so nothing is left behind.
- A supervisor killed with SIGKILL cannot stop anything: on Linux each child asks the kernel
  for ``PR_SET_PDEATHSIG = SIGKILL``, so it dies with the supervisor whatever its group.

Children get stdin from /dev/null: in a background group, reading the terminal would stop
them (SIGTTIN) and they would then look hung.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from runtime.liveness import BEACON_FD_ENV, BeaconPipe
from supervision.policy import Exit, RestartType

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ChildSpec:
    """How to run and supervise one child.

    ``beacon_timeout_s``: the child is hung once its beacon (see :mod:`runtime.liveness`)
    is silent that long; ``None`` = no heartbeat watch (the child gets no ``LEA_BEACON_FD``).
    ``start_grace_s``: time allowed for the first beat after a start (imports, opening
    databases...). ``env``: extra variables on top of the supervisor's environment.
    """

    name: str
    argv: Sequence[str]
    restart: RestartType = RestartType.PERMANENT
    shutdown_timeout_s: float = 5.0
    env: Mapping[str, str] = field(default_factory=dict)
    beacon_timeout_s: float | None = 3.0
    start_grace_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a child needs a name")
        if not self.argv:
            raise ValueError(f"child {self.name!r}: empty argv")
        if self.shutdown_timeout_s < 0:
            raise ValueError(f"child {self.name!r}: shutdown_timeout_s must be >= 0")
        if self.beacon_timeout_s is not None and self.beacon_timeout_s <= 0:
            raise ValueError(f"child {self.name!r}: beacon_timeout_s must be > 0 or None")
        # Freeze the mutable inputs so a spec cannot change under a running supervisor.
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "restart", RestartType(self.restart))
        object.__setattr__(self, "env", dict(self.env))


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die (SIGKILL) when the supervisor dies.

    Runs between fork and exec, so it only calls a pre-resolved C function and two syscalls.
    The supervisor's only other thread is libzmq's I/O thread, which holds no Python lock,
    and glibc keeps malloc usable after fork: preexec_fn's usual threading hazard does not
    apply here. PDEATHSIG belongs to the forking *thread*: ``run()`` forks from the main
    thread, which lives as long as the supervisor.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the supervisor died before prctl: nobody to watch us
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class Child:
    """A child of the tree and its current process (``proc`` is None when not running)."""

    def __init__(self, spec: ChildSpec, base_env: Mapping[str, str]) -> None:
        self.spec = spec
        self._base_env = {k: v for k, v in base_env.items() if k != BEACON_FD_ENV}
        self.proc: subprocess.Popen[bytes] | None = None
        self.pipe: BeaconPipe | None = None
        self.pid: int | None = None  # of the current process, or of the last one
        self.started_at = 0.0
        self.starts = 0
        self.hung = False  # killed by us for missing heartbeats
        self.stopping = False  # being stopped by us (shutdown or a sibling's restart)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def running(self) -> bool:
        """Started and not reaped yet (a zombie counts: its exit is still to be handled)."""
        return self.proc is not None

    @property
    def watched(self) -> bool:
        """Whether its heartbeats are checked now."""
        return (self.proc is not None and self.pipe is not None and not self.hung
                and not self.stopping and self.spec.beacon_timeout_s is not None)

    def start(self, now: float) -> int:
        """Spawn a new process; its pid. Raises OSError/SubprocessError if it cannot start."""
        assert self.proc is None, f"{self.name} is already running"
        assert self.pipe is None, f"{self.name}: close() the last pipe first"
        env = dict(self._base_env)
        env.update(self.spec.env)
        pipe = BeaconPipe() if self.spec.beacon_timeout_s is not None else None
        if pipe is not None:
            env.update(pipe.child_env())
        try:
            proc = subprocess.Popen(
                list(self.spec.argv), env=env, stdin=subprocess.DEVNULL,
                pass_fds=(pipe.write_fd,) if pipe is not None else (),
                process_group=0, preexec_fn=_die_with_parent(),
            )
        except BaseException:
            if pipe is not None:
                pipe.close()
            raise
        if pipe is not None:
            pipe.close_write_end()  # our copy would keep the pipe from ever reaching EOF
        self.proc, self.pipe, self.pid = proc, pipe, proc.pid
        self.started_at = now
        self.starts += 1
        self.hung = self.stopping = False
        return proc.pid

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the child's process group (to the child alone as a fallback)."""
        if self.proc is None:
            return  # reaped: its pid may belong to someone else by now
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            # The group is gone (the child may have moved itself out of it): the process then.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signum)
        except PermissionError:
            # A member of the group we may not signal (setuid): at least the child itself.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signum)

    def deadline(self) -> float | None:
        """When the child counts as hung without a new beat; None if it is not watched."""
        if not self.watched:
            return None
        assert self.pipe is not None and self.spec.beacon_timeout_s is not None
        return self.pipe.deadline(self.spec.beacon_timeout_s, self.started_at,
                                  self.spec.start_grace_s)

    def poll(self) -> Exit | None:
        """Reap the process if it ended: its exit, once; None while it runs.

        Call :meth:`close` afterwards, once the pipe is out of the caller's selector.
        """
        if self.proc is None:
            return None
        returncode = self.proc.poll()
        if returncode is None:
            return None
        self.proc = None
        # The pipe stays open: the caller unregisters it from its selector before close().
        return Exit.from_returncode(returncode, hung=self.hung, shutdown=self.stopping)

    def close(self) -> None:
        """Release the heartbeat pipe of the last process (after it was reaped)."""
        if self.pipe is not None:
            self.pipe.close()
            self.pipe = None
