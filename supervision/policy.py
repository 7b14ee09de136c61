"""The restart policy of the supervisor, as pure data and functions (OTP semantics).

Nothing here starts a process or reads a clock: the supervisor passes the time in. That keeps
every rule testable in microseconds and the supervisor loop a thin shell around
:meth:`RestartPolicy.decide`.

Rules (Erlang/OTP ``supervisor``):

- restart types: ``permanent`` is always restarted; ``transient`` only after an abnormal exit
  (non-zero code, killed by a signal the supervisor did not send, or killed as hung);
  ``temporary`` never, and it leaves the tree when it exits.
- strategies: ``one_for_one`` restarts the exited child only; ``rest_for_one`` also the children
  started after it; ``one_for_all`` every child. Siblings that are restarted are first stopped
  in reverse start order, then the whole set is started again in start order. A temporary
  sibling caught in such a set is stopped and dropped, as OTP does.
- intensity: more than ``max_restarts`` restarts within ``period_s`` seconds and the supervisor
  gives up: it stops the tree. One decision counts as one restart, however many children it
  restarts.
"""

from __future__ import annotations

import signal as _signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class RestartType(StrEnum):
    """When an exited child is restarted."""

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


class Strategy(StrEnum):
    """Which children an exit restarts."""

    ONE_FOR_ONE = "one_for_one"
    REST_FOR_ONE = "rest_for_one"
    ONE_FOR_ALL = "one_for_all"


class ExitReason(StrEnum):
    """Why a child process ended (the ``reason`` of ``lea:actor_exited``)."""

    EXIT = "exit"  # it exited by itself with a code
    SIGNAL = "signal"  # a signal the supervisor did not send killed it
    HUNG = "hung"  # the supervisor killed it for missing its heartbeats
    SHUTDOWN = "shutdown"  # the supervisor stopped it (tree shutdown or a sibling's restart)


def signal_name(signum: int | None) -> str | None:
    """``"SIGKILL"`` for 9; the number as text for a signal Python does not name."""
    if signum is None:
        return None
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return str(signum)


@dataclass(frozen=True, slots=True)
class Exit:
    """How a child ended: exactly one of ``code`` or ``signal`` is set."""

    reason: ExitReason
    code: int | None = None
    signal: int | None = None

    def __post_init__(self) -> None:
        if (self.code is None) == (self.signal is None):
            raise ValueError("an exit has either a code or a signal")
        if self.reason is ExitReason.EXIT and self.code is None:
            raise ValueError("reason 'exit' needs a code")
        if self.reason in (ExitReason.SIGNAL, ExitReason.HUNG) and self.signal is None:
            raise ValueError(f"reason {self.reason.value!r} needs a signal")

    @classmethod
    def from_returncode(cls, returncode: int, *, hung: bool = False,
                        shutdown: bool = False) -> Exit:
        """From a ``Popen.returncode`` (negative = killed by that signal).

        ``hung``: the supervisor killed it for missing heartbeats; ``shutdown``: the supervisor
        was stopping it.
        """
        if returncode < 0:
            signum = -returncode
            if hung:
                return cls(ExitReason.HUNG, signal=signum)
            if shutdown:
                return cls(ExitReason.SHUTDOWN, signal=signum)
            return cls(ExitReason.SIGNAL, signal=signum)
        # A code means the child exited by itself, even if the supervisor had just found it
        # hung (it exited before the SIGKILL landed): report what really happened.
        if shutdown:
            return cls(ExitReason.SHUTDOWN, code=returncode)
        return cls(ExitReason.EXIT, code=returncode)

    @property
    def abnormal(self) -> bool:
        """OTP's "abnormal": anything but a clean exit 0 or a stop by the supervisor."""
        if self.reason is ExitReason.SHUTDOWN:
            return False
        if self.reason is ExitReason.EXIT:
            return self.code != 0
        return True

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.signal)


def should_restart(restart: RestartType, exit_: Exit) -> bool:
    """Whether a child of type ``restart`` that ended with ``exit_`` is restarted."""
    if restart is RestartType.PERMANENT:
        return True
    if restart is RestartType.TRANSIENT:
        return exit_.abnormal
    return False


class RestartIntensity:
    """Restart times within the sliding window, and whether the limit is exceeded.

    OTP: a restart at ``now`` is added, restarts older than ``now - period_s`` are forgotten,
    and more than ``max_restarts`` left means give up. ``max_restarts=0`` gives up at the
    first restart.
    """

    def __init__(self, max_restarts: int = 5, period_s: float = 30.0) -> None:
        if max_restarts < 0:
            raise ValueError("max_restarts must be >= 0")
        if period_s <= 0:
            raise ValueError("period_s must be > 0")
        self.max_restarts = max_restarts
        self.period_s = period_s
        self._times: deque[float] = deque()

    def __repr__(self) -> str:
        return f"RestartIntensity(max_restarts={self.max_restarts}, period_s={self.period_s})"

    def _forget(self, now: float) -> None:
        # Times only grow in practice (a monotonic clock); filter rather than pop from the left
        # so that an out-of-order ``now`` from a test cannot drop a restart still in the window.
        self._times = deque(t for t in self._times if now - t <= self.period_s)

    def count(self, now: float) -> int:
        """Restarts within the window ending at ``now``."""
        self._forget(now)
        return len(self._times)

    def exceeded(self, now: float) -> bool:
        """Whether the restarts within the window ending at ``now`` are past the limit."""
        return self.count(now) > self.max_restarts

    def add(self, now: float) -> int:
        """Record a restart at ``now``; the number of restarts within the window, this one too."""
        self._times.append(now)
        return self.count(now)

    def reset(self) -> None:
        self._times.clear()


class Verdict(StrEnum):
    """What the supervisor does about an exit."""

    NONE = "none"  # nothing is restarted (temporary, or transient exiting normally)
    RESTART = "restart"
    STOP_TREE = "stop_tree"  # restart intensity exceeded: stop everything and exit non-zero


@dataclass(frozen=True, slots=True)
class Decision:
    """The supervisor's orders for one exit.

    Carry out in this order: stop ``stop`` (reverse start order; the exited child is never in
    it), forget ``remove``, then start ``start`` (start order). ``stop`` may name children that
    are no longer running: skip those.
    """

    verdict: Verdict
    exited: str
    why: str
    stop: tuple[str, ...] = ()
    start: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    restarts_in_period: int = 0


ChildRef = tuple[str, RestartType]
"""A child of the tree as the policy sees it: its name and restart type."""


def affected(names: Sequence[str], strategy: Strategy, exited: str) -> tuple[str, ...]:
    """The children a restart of ``exited`` involves, in start order (``exited`` included)."""
    index = names.index(exited)
    if strategy is Strategy.ONE_FOR_ONE:
        return (exited,)
    if strategy is Strategy.REST_FOR_ONE:
        return tuple(names[index:])
    return tuple(names)


class RestartPolicy:
    """Strategy + intensity: turns each exit into a :class:`Decision`.

    Stateful only through its :class:`RestartIntensity` (the restart history).
    """

    def __init__(self, strategy: Strategy = Strategy.ONE_FOR_ONE,
                 intensity: RestartIntensity | None = None) -> None:
        self.strategy = strategy
        self.intensity = intensity if intensity is not None else RestartIntensity()

    def decide(self, children: Sequence[ChildRef], exited: str, exit_: Exit,
               now: float) -> Decision:
        """The decision for ``exited`` ending with ``exit_`` at ``now``.

        ``children``: the current tree in start order (temporary children that already left
        it excluded). Raises ValueError if ``exited`` is not one of them or names repeat.
        """
        names = [name for name, _ in children]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate child names in {names}")
        if exited not in names:
            raise ValueError(f"{exited!r} is not a child of this tree")
        types = dict(children)
        restart = types[exited]
        if not should_restart(restart, exit_):
            return Decision(
                Verdict.NONE, exited,
                why=f"{restart.value} child, {_describe(exit_)}: not restarted",
                remove=(exited,) if restart is RestartType.TEMPORARY else (),
                restarts_in_period=self.intensity.count(now),
            )
        count = self.intensity.add(now)
        if count > self.intensity.max_restarts:
            return Decision(
                Verdict.STOP_TREE, exited,
                why=(f"{count} restarts within {self.intensity.period_s:g}s "
                     f"(max {self.intensity.max_restarts}), last: {exited} {_describe(exit_)}"),
                stop=tuple(n for n in reversed(names) if n != exited),
                restarts_in_period=count,
            )
        group = affected(names, self.strategy, exited)
        return Decision(
            Verdict.RESTART, exited,
            why=f"{restart.value} child, {_describe(exit_)}: {self.strategy.value}",
            stop=tuple(n for n in reversed(group) if n != exited),
            start=tuple(n for n in group if types[n] is not RestartType.TEMPORARY),
            remove=tuple(n for n in group if types[n] is RestartType.TEMPORARY),
            restarts_in_period=count,
        )


def _describe(exit_: Exit) -> str:
    if exit_.reason is ExitReason.EXIT:
        return f"exited with code {exit_.code}"
    if exit_.reason is ExitReason.HUNG:
        return "hung (missed heartbeats)"
    if exit_.reason is ExitReason.SHUTDOWN:
        return "stopped by the supervisor"
    return f"killed by {exit_.signal_name}"
