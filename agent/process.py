"""The agent process: an MDP worker of ``agent.<machine_id>`` that executes what it is sent.

Life of an action here (docs/architecture.md):

1. A :class:`DispatchAction` arrives. The ledger, keyed by ``(replay_id, action_id)``,
   decides (agent/protocol/serve.py): new → mark it *started* on disk, hand it to the execution
   thread, reply :class:`ActionReceived`; already finished → no execution, the original report goes
   out again re-addressed to this attempt (``already_executed``); being executed right now →
   ignored, its report will come (and is re-addressed to the newest attempt seen meanwhile).
   Action ids are stable per workflow step: the same step in another replay is another
   action, executed again. A resume of a step given up by the watchdog names the ids it
   ``supersedes``: the ledger makes one step of them (agent/protocol/serve.py).
2. The execution thread runs the executor (one action at a time, C2) while the main loop
   keeps heartbeating the broker and the supervisor (C3). Any exception becomes a failed
   outcome: a received action is always reported (C1).
3. The main loop marks the action finished with its report, on disk, and sends the report as
   a request to ``dispatcher`` until a :class:`ReportAck` comes (case d). An unacked report
   survives a restart in the ledger and is sent again.

The agent never pauses by itself (C5): pauses are the dispatcher's decision.
"""

from __future__ import annotations

import errno
import os
import queue
import re
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

import zmq
from loguru import logger

from agent.effects import EffectsLog
from agent.executors.base import ActionOutcome, Executor
from agent.link.curve_link import EXIT, EXIT_REFUSED, CurveLink
from agent.link.heartbeat import Heartbeats
from agent.protocol.asks import Asks
from agent.protocol.ledger import Ledger, LedgerLocked, LedgerVersionError, outbox_report
from agent.protocol.outbox import Outbox
from agent.protocol.serve import Intake
from agent.screen.dpi import describe as describe_scaling
from agent.screen.geometry import last_dpi_reading
from agent.screen.probe import probe_for
from agent.status import StatusFile, default_data_dir, log_file
from agent.windows.console_stop import ConsoleStop
from agent.windows.pause_notice import PauseNotices
from agent.windows.session_end import SessionEnd
from messages.base import Message
from messages.codec import Envelope
from messages.control import ErrorReply, Ping, Pong
from messages.dispatch import DispatchAction
from messages.pause import AgentPaused, AgentPauseEnded
from messages.safety_checks import CaptureScreen, ScreenCaptured
from messages.workflow import INPUT_TYPES
from runtime.settings import Settings
from transport.client import Client
from transport.peer_id import TREE_USER_ID, identity_of
from transport.poll_loop import Pollable, PollLoop
from transport.worker import Request, Worker, answer

MACHINE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
SHUTDOWN_GRACE_S = 3.0
AVAILABLE_EVERY_S = 1.0
"""How often the agent tells the dispatcher it is alive, and its pool: the dispatcher takes an
agent silent for a few of these for offline (DispatcherConfig.agent_seen_s)."""
"""On SIGTERM, how long an action in progress may take to finish before we leave anyway."""


class AgentError(RuntimeError):
    """The agent cannot be built (a bad machine id)."""


_Done = tuple[DispatchAction, ActionOutcome, float]


class Agent:
    """``Agent(...).run()`` serves until SIGTERM / SIGINT and returns 0."""

    # Opened by run(), which owns them from start to end.
    ledger: Ledger
    ctx: zmq.Context[Any]
    client: Client
    outbox: Outbox  # requests to the dispatcher, sent again until answered
    asks: Asks  # what goes in it: reports, claims, progress, hello
    intake: Intake  # what is done with each dispatch
    worker: Worker
    heartbeats: Heartbeats  # screen heartbeats to monitor_router (agent/link/heartbeat.py)
    pauses: PauseNotices  # pause messages shown to the person (agent/windows/pause_notice.py)

    def __init__(self, settings: Settings, machine_id: str, executor: Executor,
                 data_dir: Path | None = None, effects_log: EffectsLog | None = None,
                 link: CurveLink | None = None) -> None:
        if not MACHINE_ID.match(machine_id):
            raise AgentError(f"invalid machine id {machine_id!r}: 1-128 letters, digits,"
                             " '_', '.', '-', starting with a letter or digit")
        self.settings = settings
        self.machine_id = machine_id
        self.service = f"agent.{machine_id}"
        self.executor = executor
        self.data_dir = data_dir or default_data_dir(settings, machine_id)
        self.effects = effects_log
        self.link = link  # CURVE keys and handshake watch (agent/link/curve_link.py), if any
        self.exit_code = 0
        self.instance_id = uuid.uuid4().hex
        self.started_at = time.time()
        self.poll_loop = PollLoop(self.service)
        self._grace_until = 0.0
        self._last_action: dict[str, Any] | None = None
        self._jobs: queue.Queue[DispatchAction | None] = queue.Queue()
        self._done: queue.Queue[_Done] = queue.Queue()
        # (dispatch, info) from the execution thread: an action waiting for a person.
        self._progress: queue.Queue[tuple[DispatchAction, dict[str, Any]]] = queue.Queue()
        if hasattr(executor, "on_progress"):
            executor.on_progress = self._on_progress
        self._console = ConsoleStop(self._request_stop, SHUTDOWN_GRACE_S + 1.0)
        self._session_end = SessionEnd(self._request_stop, SHUTDOWN_GRACE_S + 1.0)

    # Execution thread -----------------------------------------------------------------------

    def _execution_loop(self) -> None:
        while (dispatch := self._jobs.get()) is not None:
            try:
                outcome = self.executor.execute(dispatch, self.effects)
            except Exception as exc:  # C1: a crash of the executor is a failed action
                logger.exception("executor failed on {}", dispatch.action.action_id)
                # Whether its input went out is the executor's to say, and it did not.
                outcome = ActionOutcome.failure(
                    f"executor_error:{type(exc).__name__}: {exc}"[:300],
                    input_performed="unknown" if dispatch.action.type in INPUT_TYPES
                    else "none")
            self._done.put((dispatch, outcome, time.time()))
            self.poll_loop.wake()

    # Requests -------------------------------------------------------------------------------

    def _serve(self, request: Request) -> bytes:
        """The encoded reply to one request; never raises."""
        sender = identity_of(request.client)
        return answer(request, lambda envelope: self._dispatch(envelope, sender),
                      self.settings.max_message_bytes, self._refused)

    def _dispatch(self, envelope: Envelope[Message], sender: str | None = None) -> Message:
        body = envelope.body
        if sender not in (None, TREE_USER_ID) and not isinstance(body, Ping):
            # Actions and pauses come from the dispatcher (the tree's door, or a local peer):
            # never from another agent that came in with CURVE, nor from a person's command
            # (transport/peer_id.py).
            logger.warning("refused a {!r} request from agent {!r}", envelope.type, sender)
            return ErrorReply(code="forbidden", message=(
                f"{self.service} takes {envelope.type!r} from the dispatcher only, not from"
                f" agent {sender!r}"), detail={"identity": sender})
        if isinstance(body, DispatchAction):
            return self.intake.on_dispatch(body)
        if isinstance(body, Ping):
            return Pong(service=self.service, pid=os.getpid(), started_at=self.started_at)
        if isinstance(body, CaptureScreen):
            return self._capture(body)
        if isinstance(body, AgentPaused):
            return self.pauses.on_paused(body)
        if isinstance(body, AgentPauseEnded):
            return self.pauses.on_pause_ended(body)
        logger.warning("refused a {!r} request: agents only take action.dispatch", envelope.type)
        return ErrorReply(code="unsupported_type",
                          message=f"{self.service} does not handle {envelope.type!r}")

    def _capture(self, msg: CaptureScreen) -> ScreenCaptured:
        """A fresh screenshot for a pause's safety checks (no input: never claimed)."""
        capture = getattr(self.executor, "capture", None)
        if capture is None:
            return ScreenCaptured(error=f"the {self.executor.name} executor cannot capture")
        try:
            image, idx = capture(msg.monitor_index, msg.monitor_geometry)
        except Exception as exc:  # a capture that fails is reported, never raised
            logger.warning("capture for {} {} failed: {}", msg.replay_id, msg.action_id, exc)
            return ScreenCaptured(error=f"{type(exc).__name__}: {exc}"[:500])
        logger.info("captured monitor {} for the pause {} ({} bytes)", idx, msg.action_id,
                    len(image))
        return ScreenCaptured(image=image, monitor_idx=idx)

    @staticmethod
    def _refused(reason: str, detail: str) -> None:
        logger.warning("refused a malformed request: {} {}", reason, detail[:300])

    def _on_progress(self, dispatch: DispatchAction, info: dict[str, Any]) -> None:
        """From the execution thread: hand to the main loop, which owns the sockets."""
        self._progress.put((dispatch, info))
        self.poll_loop.wake()

    def _send_progress(self) -> None:
        while True:
            try:
                dispatch, info = self._progress.get_nowait()
            except queue.Empty:
                return
            self.asks.progress(dispatch, info)

    def _collect_done(self) -> None:
        while True:
            try:
                dispatch, outcome, executed_at = self._done.get_nowait()
            except queue.Empty:
                return
            self.intake.finish(dispatch, outcome, executed_at)
            # The error's code only: its detail may quote a window title naming a patient.
            self._last_action = {
                "replay_id": dispatch.replay_id, "action_id": dispatch.action.action_id,
                "type": dispatch.action.type, "at": executed_at,
                "outcome": "ok" if outcome.success else
                f"failed ({(outcome.error or 'error').split(':')[0]})"}

    def _status(self, now: float) -> dict[str, Any]:
        """What ``lea-agent status`` shows (agent/status.py)."""
        worker, state = self.worker, self.heartbeats.latest()
        scaling = last_dpi_reading()  # Windows, a real screen: read with the monitors
        heard = now - worker.heard_at <= worker.heartbeat_interval_s * worker.liveness
        return {
            "service": self.service, "pid": os.getpid(), "started_at": self.started_at,
            "executor": self.executor.name, "log_file": str(log_file(self.data_dir)),
            "link": {"endpoint": worker.endpoint, "endpoints": self.settings.mdp_endpoints,
                     "transport": "curve" if self.link is not None else "plain",
                     "broker_heard": heard, "hello_answered_at": self.asks.hello_answered_at,
                     "router_answering": self.heartbeats.router_answering},
            "monitors": [m.model_dump(mode="json") for m in state.monitors] if state else [],
            "display_scaling": None if scaling is None else describe_scaling(scaling),
            "last_action": self._last_action}

    # The report path -----------------------------------------------------------------------

    def _wire(self, ledger: Ledger, client: Client) -> None:
        """What the agent asks through ``client`` (agent/protocol/asks.py), and the intake that
        records each action in ``ledger`` before it runs and its report before it is sent."""
        self.ledger, self.client = ledger, client
        self.outbox = Outbox(client)
        self.asks = Asks(self.outbox, ledger, self.machine_id)
        self.intake = Intake(ledger, self.machine_id, self.service, self._jobs.put,
                             self.asks.report, lambda: self.poll_loop.stopping,
                             self.asks.claim, self.instance_id)

    # Startup and the loop -------------------------------------------------------------------

    def _resume_ledger(self) -> None:
        for entry in self.ledger.unfinished():
            self.intake.after_restart(entry)
        for entry in self.ledger.unacked():
            try:
                sent = outbox_report(entry)  # the very bytes first sent, same envelope id
            except (LookupError, ValueError):
                logger.exception("unreadable report of {} in the ledger", entry.action_id)
                continue
            logger.info("re-sending the unacked report of {}", entry.action_id)
            self.asks.report(sent)

    def _request_stop(self, reason: str) -> None:
        """A signal (SIGTERM, SIGINT; Windows: SIGBREAK) or, on Windows, a console close /
        log-off / shutdown (agent/windows/console_stop.py, on a thread of the system's; or
        agent/windows/session_end.py, on its window's thread)."""
        if not self.poll_loop.stopping:
            self._grace_until = time.monotonic() + SHUTDOWN_GRACE_S
        self.poll_loop.stop(reason)

    def run(self) -> int:
        """Serve until SIGTERM / SIGINT; 0 on a clean stop, 2 if the agent cannot start,
        EXIT_REFUSED if the broker refused its CURVE key (with --exit-on-auth-failure)."""
        try:
            ledger = Ledger(self.data_dir / "ledger.sqlite3")
        except (LedgerLocked, LedgerVersionError) as exc:
            logger.error("{}", exc)
            return 2
        except (OSError, sqlite3.Error) as exc:
            if _unwritable(exc):
                logger.error("cannot write the ledger in {} ({}): the agent does not start,"
                             " because it never performs an action it cannot record first;"
                             " give --data-dir a folder on a writable disk with free space",
                             self.data_dir, exc)
                return 2
            if isinstance(exc, OSError):
                logger.error("cannot open the ledger in {}: {}", self.data_dir, exc)
                return 2
            # Never start on a fresh ledger silently: the old one knows what already ran.
            logger.error("cannot open the ledger in {}: {}; move it away to start afresh"
                         " (its actions could then run twice)", self.data_dir, exc)
            return 2
        in_main = threading.current_thread() is threading.main_thread()
        if in_main and sys.platform == "win32":
            self._console.install()
            if not self._session_end.install():
                logger.warning("no stop at log-off / shutdown: {}", self._session_end.error)
        self.ctx = zmq.Context()
        setup = self.link.setup if self.link is not None else None
        self._wire(ledger, Client(self.ctx, self.settings.mdp_endpoints, setup))
        self.heartbeats = Heartbeats(self.machine_id, self.client, probe_for(self.executor))
        self.pauses = PauseNotices(self.executor.name)
        worker: Worker | None = None
        thread = threading.Thread(target=self._execution_loop, name="execution", daemon=True)
        try:
            with self.poll_loop.signals(self._request_stop):
                self._resume_ledger()
                self.worker = worker = Worker(
                    self.ctx, self.settings.mdp_endpoints, self.service,
                    self.settings.heartbeat_interval_s, self.settings.heartbeat_liveness,
                    setup)
                worker.on_move = self.client.follow  # to the broker that serves, at once
                thread.start()
                self.heartbeats.start()
                logger.info("{}: serving on {} (executor {}, ledger {}, instance {})",
                            self.service, " or ".join(self.settings.mdp_endpoints),
                            self.executor.name,
                            self.ledger.path, self.instance_id)
                self._serve_loop()
        finally:
            if self.intake.executing is not None:
                logger.warning("{} still executing at exit: it will be reported indeterminate"
                               " after the restart", self.intake.executing.action.action_id)
            self._jobs.put(None)
            self.heartbeats.stop()
            self.pauses.close()
            if self.link is not None:
                self.link.close()
            if worker is not None:
                worker.close()
            self.client.close()
            self.ctx.term()
            self.ledger.close()
            logger.info("{}: stopped", self.service)
            # Last: a console close or session end waiting for us then lets Windows end the
            # process, which may happen at once.
            self._console.stopped()
            self._session_end.stopped()
        return self.exit_code

    def _serve_loop(self) -> None:
        """Serve on the loop (transport/poll_loop.py) until a stop, then while an action in
        progress has its grace."""
        poll_loop, worker, client = self.poll_loop, self.worker, self.client
        poll_loop.watch(lambda: (worker.socket,), self._serve_ready)
        poll_loop.watch(lambda: (client.socket,), lambda _ready: client.drain())
        poll_loop.each_turn(self._collect)
        poll_loop.add(worker)
        poll_loop.add(client)
        poll_loop.add(self.outbox)
        poll_loop.each_turn(self.heartbeats.tick)
        status = StatusFile(self.data_dir)
        poll_loop.each_turn(lambda now: status.update(self._status(now), now))
        if (link := self.link) is not None:
            poll_loop.each_turn(lambda now: self._relink(link.tick(now)))
        greeted = 0  # the worker connection our last hello went out on

        def hello(_now: float) -> None:
            # At start and after each reconnection: the dispatcher resends what is ours.
            nonlocal greeted
            if worker.connections != greeted:
                greeted = worker.connections
                self.asks.hello(self.instance_id, self.intake.holding())

        hello(0.0)
        poll_loop.each_turn(hello)
        told = 0.0  # monotonic time of the last agent.available

        def available(_now: float) -> None:
            # Alive and of this pool: a free agent takes the next work item (docs/queues.md).
            nonlocal told
            if time.monotonic() - told >= AVAILABLE_EVERY_S:
                told = time.monotonic()
                self.asks.available(self.instance_id, self.settings.agent_pool)

        poll_loop.each_turn(available)
        poll_loop.run(linger=lambda: (self.intake.executing is not None
                                      and time.monotonic() <= self._grace_until))

    def _serve_ready(self, _ready: Collection[Pollable]) -> None:
        for request in self.worker.drain():
            self.worker.reply(request, self._serve(request))

    def _collect(self, _now: float) -> None:
        """What the execution thread handed over: finished actions, then progress."""
        self._collect_done()
        self._send_progress()

    def _relink(self, due: str | None) -> None:
        """The broker refused our handshake (agent/link/curve_link.py): new sockets, or stop."""
        if due is None:
            return
        if due == EXIT:
            self.exit_code = EXIT_REFUSED
            self.poll_loop.stop()
        else:
            self.worker.reconnect("CURVE handshake refused")
            self.client.reconnect()


def _unwritable(exc: OSError | sqlite3.Error) -> bool:
    """A read-only or full disk (or a folder the agent may not write), as the OS or SQLite
    says it."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EROFS, errno.ENOSPC, errno.EACCES, errno.EPERM,
                             errno.EDQUOT)
    text = str(exc).lower()
    return any(word in text for word in ("readonly", "read-only", "disk is full",
                                         "unable to open", "disk i/o error"))

