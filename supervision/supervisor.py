"""The supervisor: starts the children, watches them, applies the restart policy.

A single-threaded loop around one selector: the children's heartbeat pipes, plus a wakeup
pipe that ``signal.set_wakeup_fd`` writes to on SIGCHLD, SIGTERM, SIGINT and SIGHUP. It
sleeps until a child exits, a beat arrives, a stop signal comes, or the earliest heartbeat
deadline passes: no polling, and an exit is handled as soon as the kernel reports it.

Stopping a child (tree shutdown, or a sibling's restart) is done synchronously, one child at a
time (SIGTERM, then SIGKILL after its ``shutdown_timeout_s``), as OTP does: reverse start order
is the guarantee, so the next child is not touched before the previous one is gone.

With ``audit_outbox`` (the tree's supervisor), each start, exit and restart, and the tree's
start and stop, is also an audit record (docs/architecture.md), sent by audit_outbox/audit_link.py
whose socket is one more fd in the selector: nothing waits for audit_log or the broker.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq
from loguru import logger

from audit_outbox.audit_link import AuditLink
from audit_outbox.sender import BACKLOG_EVERY_S
from audit_outbox.store import AuditOutbox
from messages.events import (
    ACTOR_EXITED,
    ACTOR_RESTARTED,
    ACTOR_STARTED,
    AUDIT_BACKLOG,
    RESTART_COUNTS,
)
from runtime.liveness import BEAT_INTERVAL_S, Beacon
from runtime.settings import Settings, load_settings, settings_env
from supervision import signals
from supervision.child import Child, ChildSpec
from supervision.policy import (
    Decision,
    Exit,
    ExitReason,
    RestartIntensity,
    RestartPolicy,
    Strategy,
    Verdict,
    signal_name,
)
from transport.bus import Publisher

EventHook = Callable[[str, dict[str, Any]], None]
"""``on_event(topic, data)``: called for every event published (e.g. to write an audit record)."""

_MAX_SLEEP_S = 1.0  # wake at least this often, should a wakeup ever be missed
_KILL_WAIT_S = 10.0  # after SIGKILL, how long to wait for the kernel to let the process go
_SPAWN_FAILED = 127  # the exit code reported for a child that could not even be spawned


class Supervisor:
    """Runs ``children`` as OS processes under an OTP-style policy; see :meth:`run`."""

    def __init__(self, children: Sequence[ChildSpec],
                 strategy: Strategy = Strategy.ONE_FOR_ONE,
                 intensity: RestartIntensity | None = None,
                 settings: Settings | None = None,
                 publisher_endpoint: str | None = None,
                 on_event: EventHook | None = None,
                 source: str = "supervisor",
                 audit_outbox: Path | None = None) -> None:
        names = [spec.name for spec in children]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate child names: {names}")
        self.settings = settings if settings is not None else load_settings()
        self.policy = RestartPolicy(Strategy(strategy), intensity)
        self.publisher_endpoint = publisher_endpoint or self.settings.bus_in_endpoint
        self.source = source
        self._on_event = on_event
        self.audit_outbox = audit_outbox  # None: no audit records (a test's own tree)
        self._audit: AuditLink | None = None
        # Children inherit our environment plus the settings we run with, so that settings
        # given to the supervisor on its command line reach every child.
        base_env = {**os.environ, **settings_env(self.settings)}
        self._children = [Child(spec, base_env) for spec in children]  # start order
        self._pending: list[tuple[Child, Exit]] = []  # spawn failures, handled as exits
        self._stop_signal: int | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wakeup_r = self._wakeup_w = -1
        self._publisher: Publisher | None = None
        self._report_at = 0.0  # when to tell the bus the counts below (monotonic)
        self._restarts: dict[str, int] = {}  # restarts of each child since we started
        self._beacon = Beacon(None)

    # -- public ------------------------------------------------------------------------------

    def run(self) -> int:
        """Start the children in order and supervise them until told to stop.

        Returns 0 after a stop signal (SIGTERM, SIGINT, SIGHUP) or :meth:`stop` and an orderly
        shutdown; 1 when the restart intensity was exceeded or the tree could not start. Must
        be called from the main thread (it installs signal handlers, restored on return).
        """
        try:  # no tree without its audit trail: a start that cannot be recorded is refused
            outbox = None if self.audit_outbox is None else AuditOutbox(self.audit_outbox)
        except (OSError, sqlite3.Error) as exc:
            logger.error("supervisor: cannot open the audit outbox {}: {}", self.audit_outbox,
                         exc)
            return 1
        self._wakeup_r, self._wakeup_w = os.pipe()
        os.set_blocking(self._wakeup_r, False)
        os.set_blocking(self._wakeup_w, False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._wakeup_r, selectors.EVENT_READ, None)
        # A supervisor may itself be supervised (nested trees): beat like any child.
        self._beacon = Beacon.from_env()
        ctx: zmq.Context[Any] = zmq.Context()
        self._publisher = Publisher(ctx, self.publisher_endpoint, self.source)
        if outbox is not None:
            # Through the tree's door: a process of this host, which a broker of a pair
            # does not count as a peer coming (broker/binary_star.py).
            self._audit = AuditLink(ctx, self.settings.tree_mdp_endpoints, outbox, self.source)
        previous = signals.install(self._wakeup_w, self._on_stop_signal)
        try:
            return self._run()
        except BaseException as exc:
            logger.exception("supervisor failed: stopping the tree")
            self._record("tree_stopped", reason="supervisor_failed", error=repr(exc)[:500])
            self._stop_all()
            raise
        finally:
            signals.restore(previous)
            for child in self._children:
                self._unwatch(child)
            self._sel.close()
            os.close(self._wakeup_r)
            os.close(self._wakeup_w)
            self._publisher.close()
            self._publisher = None
            if self._audit is not None:  # what is not acknowledged waits for the next run
                self._audit.close()
                self._audit = None
            ctx.term()

    def stop(self) -> None:
        """Ask :meth:`run` for an orderly shutdown (as SIGTERM would); safe from a thread."""
        self._stop_signal = 0
        with contextlib.suppress(OSError):
            os.write(self._wakeup_w, b"\0")

    def pids(self) -> dict[str, int | None]:
        """The pid of each running child, None for a child that is not running."""
        return {c.name: c.pid if c.running else None for c in self._children}

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> int:
        strategy = self.policy.strategy.value
        intensity = self.policy.intensity
        logger.info("supervisor: {} children, {}, at most {} restarts in {:g}s",
                    len(self._children), strategy, intensity.max_restarts, intensity.period_s)
        self._record("tree_started", pid=os.getpid(), children=[c.name for c in self._children],
                     strategy=strategy, max_restarts=intensity.max_restarts,
                     period_s=intensity.period_s)
        for child in list(self._children):
            if self._stop_signal is not None:
                break
            try:
                self._start(child, time.monotonic())
            except (OSError, subprocess.SubprocessError) as exc:
                logger.error("supervisor: cannot start {}: {}; stopping the tree", child.name, exc)
                self._record("tree_stopped", reason="start_failed", name=child.name,
                             error=str(exc)[:500])
                self._stop_all()
                return 1
        while True:
            if self._stop_signal is not None:
                how = signal_name(self._stop_signal) if self._stop_signal else "stop()"
                logger.info("supervisor: {} received, stopping the tree", how)
                self._record("tree_stopped", reason="stop_requested", signal=how)
                self._stop_all()
                logger.info("supervisor: tree stopped")
                return 0
            self._beacon.beat()
            self._wait(self._sleep_time(time.monotonic()))
            now = time.monotonic()
            rc = self._reap(now)
            if rc is not None:
                return rc
            self._kill_hung(now)
            if self._audit is not None:
                self._audit.pump(now)
            self._report(now)

    def _report(self, now: float) -> None:
        """Every BACKLOG_EVERY_S: ``lea:restart_counts`` (each child's restarts since this
        supervisor started: told again and again, a restart event lost with the broker it
        restarted is still counted) and ``lea:audit_backlog`` (the records waiting in the
        outbox, the broker's among them: this link sends them)."""
        if self._publisher is None or now < self._report_at:
            return
        self._report_at = now + BACKLOG_EVERY_S
        counts = {c.name: self._restarts.get(c.name, 0) for c in self._children}
        self._publisher.publish(RESTART_COUNTS, counts={**self._restarts, **counts})
        if self._audit is None:
            return
        try:
            pending = self._audit.outbox.count()
        except sqlite3.Error as exc:
            logger.warning("supervisor: cannot count the audit outbox: {}", exc)
            return
        self._publisher.publish(AUDIT_BACKLOG, sender=self.source, pending=pending)

    def _sleep_time(self, now: float) -> float:
        """Until the earliest heartbeat deadline (a little after, so it has passed)."""
        timeout = _MAX_SLEEP_S
        if self._pending:
            return 0.0
        for child in self._children:
            deadline = child.deadline()
            if deadline is not None:
                timeout = min(timeout, deadline - now + 0.01)
        if self._beacon.active:
            timeout = min(timeout, BEAT_INTERVAL_S)
        if self._audit is not None and (wake := self._audit.wake_at()) is not None:
            timeout = min(timeout, wake - now + 0.001)
        return max(0.0, timeout)

    def _wait(self, timeout: float) -> None:
        assert self._sel is not None
        # The audit link's socket is watched during the wait only: its client opens a new
        # socket when it moves to the other broker of a pair, and the number of the one it
        # closed may by then be a new child's heartbeat pipe.
        audit_fd = self._audit.fileno() if self._audit is not None else None
        if audit_fd is not None:
            self._sel.register(audit_fd, selectors.EVENT_READ, self._audit)
        try:
            ready = self._sel.select(timeout)
        finally:
            if audit_fd is not None:
                self._sel.unregister(audit_fd)
        now = time.monotonic()
        for key, _ in ready:
            if key.fd == self._wakeup_r:
                self._drain_wakeup()
            elif isinstance(key.data, Child):
                self._drain(key.data, now)
            # else the audit link's socket: the loop pumps it after every wait

    def _drain(self, child: Child, now: float) -> None:
        if child.pipe is not None and not child.pipe.drain(now):
            # EOF: the child is gone or closed its end; a readable-forever fd must leave the
            # selector or the loop would spin. Its exit comes through SIGCHLD.
            self._unregister(child)

    def _drain_wakeup(self) -> None:
        # The bytes are signal numbers; the handlers already recorded what matters.
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wakeup_r, 512):
                pass

    def _reap(self, now: float) -> int | None:
        """Handle every child that ended; an exit code for run() when the tree must stop."""
        exits: list[tuple[Child, int | None, Exit]] = [
            (child, None, exit_) for child, exit_ in self._pending  # never got a pid
        ]
        self._pending = []
        for child in self._children:
            exit_ = child.poll()
            if exit_ is not None:
                exits.append((child, child.pid, exit_))
        # Report every exit first: a decision below may restart a child whose exit was
        # reaped in the same sweep, and that exit must still be told (and its pipe closed).
        for child, pid, exit_ in exits:
            self._unwatch(child)
            self._exited(child, pid, exit_)
        for child, _pid, exit_ in exits:
            if child not in self._children or child.running:
                continue  # a decision for an earlier exit already dropped or restarted it
            refs = [(c.name, c.spec.restart) for c in self._children]
            decision = self.policy.decide(refs, child.name, exit_, now)
            rc = self._apply(decision)
            if rc is not None:
                return rc
        return None

    def _kill_hung(self, now: float) -> None:
        for child in self._children:
            deadline = child.deadline()
            if deadline is None or now <= deadline:
                continue
            self._drain(child, now)  # beats may be waiting unread if we were busy
            deadline = child.deadline()
            if deadline is None or now <= deadline:
                continue
            logger.warning("supervisor: {} (pid {}) missed its heartbeats for {:g}s: "
                           "killing it as hung", child.name, child.pid,
                           child.spec.beacon_timeout_s)
            child.hung = True
            child.signal(signal.SIGKILL)  # its exit is then reaped like any other

    # -- decisions ---------------------------------------------------------------------------

    def _apply(self, decision: Decision) -> int | None:
        if decision.verdict is Verdict.NONE:
            logger.info("supervisor: {}", decision.why)
            self._remove(decision.remove)
            return None
        if decision.verdict is Verdict.STOP_TREE:
            logger.error("supervisor: restart intensity exceeded ({}): stopping the tree and "
                         "giving up", decision.why)
            intensity = self.policy.intensity
            self._record("tree_stopped", reason="restart_intensity", why=decision.why,
                         restarts_in_period=decision.restarts_in_period,
                         max_restarts=intensity.max_restarts, period_s=intensity.period_s)
            self._stop_all()
            return 1
        logger.info("supervisor: restarting {} ({}; {} restarts in the last {:g}s)",
                    ", ".join(decision.start), decision.why, decision.restarts_in_period,
                    self.policy.intensity.period_s)
        for name in decision.stop:
            self._stop(self._child(name))
        self._remove(decision.remove)
        for name in decision.start:
            if self._stop_signal is not None:
                break  # shutting down: starting more children would only delay it
            child = self._child(name)
            previous_pid = child.pid
            try:
                pid = self._start(child, time.monotonic())
            except (OSError, subprocess.SubprocessError) as exc:
                logger.error("supervisor: cannot restart {}: {}", name, exc)
                # Counted like a crash, so a child that can never start ends in STOP_TREE.
                self._pending.append((child, Exit(ExitReason.EXIT, code=_SPAWN_FAILED)))
                continue
            logger.info("supervisor: {} restarted (pid {}, was {})", name, pid, previous_pid)
            self._restarts[name] = self._restarts.get(name, 0) + 1
            self._emit(ACTOR_RESTARTED, name=name, pid=pid, previous_pid=previous_pid,
                       why=decision.why, restarts_in_period=decision.restarts_in_period,
                       restarts=child.starts - 1)
        return None

    def _child(self, name: str) -> Child:
        return next(c for c in self._children if c.name == name)

    def _remove(self, names: Sequence[str]) -> None:
        for name in names:
            child = self._child(name)
            self._unwatch(child)
            self._children.remove(child)
            logger.info("supervisor: {} leaves the tree", name)

    # -- starting and stopping ---------------------------------------------------------------

    def _start(self, child: Child, now: float) -> int:
        pid = child.start(now)
        if child.pipe is not None:
            assert self._sel is not None
            self._sel.register(child.pipe.read_fd, selectors.EVENT_READ, child)
        logger.info("supervisor: {} started (pid {})", child.name, pid)
        self._emit(ACTOR_STARTED, name=child.name, pid=pid)
        return pid

    def _stop_all(self) -> None:
        for child in reversed(list(self._children)):
            self._stop(child)

    def _stop(self, child: Child) -> None:
        """SIGTERM, then SIGKILL after the child's shutdown timeout; waits until it is gone."""
        if not child.running:
            return
        pid = child.pid
        exit_ = child.poll()  # it may have ended by itself: then report what really happened
        if exit_ is None:
            child.stopping = True
            child.signal(signal.SIGTERM)
            child.signal(signal.SIGCONT)  # a stopped process must run to act on SIGTERM
            exit_ = self._wait_exit(child, child.spec.shutdown_timeout_s)
            if exit_ is None:
                logger.warning("supervisor: {} (pid {}) still running {:g}s after SIGTERM: "
                               "SIGKILL", child.name, pid, child.spec.shutdown_timeout_s)
                child.signal(signal.SIGKILL)
                exit_ = self._wait_exit(child, _KILL_WAIT_S)
        self._unwatch(child)
        if exit_ is None:
            logger.error("supervisor: {} (pid {}) survived SIGKILL for {:g}s; abandoning it",
                         child.name, pid, _KILL_WAIT_S)
            child.proc = None
            return
        self._exited(child, pid, exit_)

    def _wait_exit(self, child: Child, timeout_s: float) -> Exit | None:
        """Wait up to ``timeout_s`` for ``child`` to end, woken by SIGCHLD; its exit or None.

        Other children's beats wait in their pipes meanwhile; the main loop reads them before
        it checks any heartbeat deadline, so a long stop cannot make a sibling look hung.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            exit_ = child.poll()
            if exit_ is not None:
                return exit_
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._beacon.beat()
            if self._beacon.active:
                remaining = min(remaining, BEAT_INTERVAL_S)
            ready, _, _ = select.select([self._wakeup_r], [], [], min(remaining, _MAX_SLEEP_S))
            if ready:
                self._drain_wakeup()

    def _unregister(self, child: Child) -> None:
        if child.pipe is not None and self._sel is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(child.pipe.read_fd)

    def _unwatch(self, child: Child) -> None:
        self._unregister(child)
        child.close()

    # -- events and signals ------------------------------------------------------------------

    def _exited(self, child: Child, pid: int | None, exit_: Exit) -> None:
        if pid is None:
            how = "could not be started"
        elif exit_.code is not None:
            how = f"exited with code {exit_.code}"
        else:
            how = f"killed by {exit_.signal_name}"
        log = logger.warning if exit_.abnormal else logger.info
        log("supervisor: {} (pid {}) {} [{}]", child.name, pid, how, exit_.reason.value)
        self._emit(ACTOR_EXITED, name=child.name, pid=pid, exit_code=exit_.code,
                   signal=exit_.signal_name, reason=exit_.reason.value)

    def _emit(self, topic: str, **data: Any) -> None:
        """A bus event, and the audit record of the same name (``lea:actor_exited`` →
        ``actor_exited``) with the same data."""
        self._record(topic.removeprefix("lea:"), **data)
        if self._publisher is not None:
            self._publisher.publish(topic, **data)
        if self._on_event is not None:
            try:
                self._on_event(topic, dict(data))
            except Exception:
                logger.exception("supervisor: on_event hook failed for {}", topic)

    def _record(self, kind: str, **data: Any) -> None:
        """An audit record (kept in the outbox until audit_log has it); never blocks."""
        if self._audit is not None:
            self._audit.record(kind, data)

    def _on_stop_signal(self, signum: int) -> None:
        if self._stop_signal is None:
            self._stop_signal = signum
