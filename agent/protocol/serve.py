"""What the agent does with each dispatch: execute it, queue it, or answer it from the ledger.

:class:`Intake` owns the action executing, the queue behind it and the ledger decisions; the
agent process (agent/process.py) owns the sockets, the loop and the execution thread, and calls in
from its main loop only (one thread).

A dispatch is one step with every action id of it the ledger knows: its own id, an id it
``supersedes`` (a resume of a step the watchdog gave up, whose abandoned copies may or may
not have run), or an id that superseded it (it is such a stale copy). If one of them ran,
the dispatch is answered with that outcome re-addressed to it (``already_executed``, or the
indeterminate report if that run of an input action was cut by a restart) and not executed;
an action without input cut by a restart is forgotten and runs again. If one is
executing right now, the dispatch waits in the queue and is answered once it is done.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import deque
from collections.abc import Callable

from loguru import logger

from agent.executors.base import ActionOutcome
from agent.protocol.asks import GRANT_EXPIRED
from agent.protocol.ledger import (
    Ledger,
    LedgerConflict,
    LedgerEntry,
    OutboxReport,
    decode_report,
    encode_report,
)
from agent.protocol.reports import build_report, indeterminate_report, readdress
from messages.base import Message
from messages.control import ErrorReply
from messages.dispatch import ActionReceived, DispatchAction
from messages.workflow import INPUT_TYPES

MAX_QUEUED = 64
"""Actions received while another executes; past this a dispatch is refused (``busy``)."""

Key = tuple[str, str]
"""``(replay_id, action_id)``: what identifies an action to the agent and its ledger."""
SendReport = Callable[[OutboxReport], None]
"""Send a report (as the ledger recorded it) until the dispatcher acks it."""
Claim = Callable[[DispatchAction, Callable[[bool, str | None], None]], None]
"""Ask the dispatcher whether this attempt may run now; the callback gets (granted, why)."""


def key(dispatch: DispatchAction) -> Key:
    return dispatch.replay_id, dispatch.action.action_id


class Intake:
    """Dispatches in, executions out (to ``execute``), reports out (to ``send``)."""

    def __init__(self, ledger: Ledger, machine_id: str, service: str,
                 execute: Callable[[DispatchAction], None], send: SendReport,
                 stopping: Callable[[], bool], claim: Claim | None = None,
                 instance_id: str | None = None) -> None:
        self.ledger = ledger
        self.instance_id = instance_id  # named in every receipt (messages.dispatch.ActionReceived)
        self.machine_id = machine_id
        self.service = service
        self._execute = execute
        self._send = send
        self._stopping = stopping
        self._claim = claim
        self.claiming = False  # ``current`` waits for the dispatcher's go-ahead
        self.current: DispatchAction | None = None
        self.queued: deque[DispatchAction] = deque()
        self._newer: dict[Key, DispatchAction] = {}  # re-deliveries seen while in progress

    def on_dispatch(self, dispatch: DispatchAction) -> Message:
        """The reply to a dispatch (ActionReceived, or an ErrorReply refusing it)."""
        action_id = dispatch.action.action_id
        if dispatch.machine_id != self.machine_id:
            logger.warning("refused {}: addressed to machine {!r}", action_id,
                           dispatch.machine_id)
            return ErrorReply(code="wrong_machine",
                              message=f"this is agent {self.machine_id!r}, "
                                      f"not {dispatch.machine_id!r}")
        received = ActionReceived(action_id=action_id, attempt_id=dispatch.attempt_id,
                                  instance_id=self.instance_id)
        k = key(dispatch)
        in_progress = [d for d in (self.current, *self.queued) if d is not None and key(d) == k]
        if in_progress:
            # Executing (or about to): its report will come. Remember the newest attempt so
            # that report is re-addressed to it rather than land as stale.
            logger.warning("{} re-delivered (attempt {}, replay {}) while in progress: not"
                           " executed again", action_id, dispatch.attempt_id,
                           dispatch.replay_id)
            if dispatch.attempt_id != in_progress[0].attempt_id:
                self._newer[k] = dispatch
            return received
        owner = self._answering(dispatch)
        if owner is not None and not self._executing(owner):
            self._answer(owner, dispatch)
            return received
        if owner is not None:
            logger.warning("{} (attempt {}) is one step with {}, executing: answered from it"
                           " once done, not executed", action_id, dispatch.attempt_id,
                           owner.action_id)
        # New, or another id of its step executes right now: it waits its turn, and is
        # answered then from that execution's outcome.
        if self._stopping():
            return ErrorReply(code="shutting_down", message=f"{self.service} is stopping")
        if len(self.queued) >= MAX_QUEUED:
            return ErrorReply(code="busy", message=f"{len(self.queued)} actions queued")
        logger.info("received {} {} (attempt {}, replay {}{})", dispatch.action.type,
                    action_id, dispatch.attempt_id, dispatch.replay_id,
                    f", supersedes {dispatch.supersedes}" if dispatch.supersedes else "")
        self.queued.append(dispatch)
        # Started before the reply goes: an ActionReceived for an idle agent means the
        # action is marked started on disk.
        self.start_next()
        return received

    def _answering(self, dispatch: DispatchAction) -> LedgerEntry | None:
        """The ledger row of the execution that stands for ``dispatch``'s step, if any: of
        its own id (or the id it is an alias of), else of an id it supersedes."""
        for action_id in (dispatch.action.action_id, *dispatch.supersedes):
            owner = self.ledger.resolve(dispatch.replay_id, action_id)
            if owner is not None and not owner.finished and not self._executing(owner):
                owner = self.after_restart(owner)  # only at startup normally
            if owner is not None:
                return owner
        return None

    def _executing(self, entry: LedgerEntry) -> bool:
        return self.current is not None and key(self.current) == entry.key

    def _answer(self, owner: LedgerEntry, dispatch: DispatchAction) -> None:
        """Answer ``dispatch`` with the outcome of ``owner``'s execution, re-addressed (cases
        g, k; or another id of the same step), instead of executing it."""
        own = owner.key == key(dispatch)
        row = owner if own else self.ledger.lookup(*key(dispatch))
        action_id = dispatch.action.action_id
        if (row is not None and row.outbox is not None
                and row.outbox_attempt == dispatch.attempt_id):
            logger.info("{} attempt {} re-delivered: its report is on its way", action_id,
                        dispatch.attempt_id)
            return
        if owner.report is None:
            logger.error("{} is finished in the ledger without a report", owner.action_id)
            return
        _msg_id, original = decode_report(owner.report)
        report = readdress(original, dispatch)
        logger.warning("{} already handled{} (attempt {}, {}): not executed again, answering"
                       " attempt {} with its report", action_id,
                       "" if own else f" as {owner.action_id}", owner.attempt_id,
                       original.error or "done", dispatch.attempt_id)
        self._send(self.ledger.queue_report(
            report, answered_by=None if own else owner.action_id))

    def start_next(self) -> None:
        """Begin the next queued dispatch, unless one executes; answer those whose step ran
        meanwhile (another id of it, queued before) without executing them.

        An attempt of an input action is first claimed from the dispatcher: only the attempt
        in flight is granted, so a copy that waited in our socket while the watchdog resent
        or gave it up, or the replay was cancelled, never runs (messages.dispatch.ClaimAttempt).
        """
        while self.current is None and self.queued and not self._stopping():
            dispatch = self.queued.popleft()
            owner = self._answering(dispatch)
            if owner is not None:
                self._answer(owner, self._newer.pop(key(dispatch), dispatch))
                continue
            if self._claim is not None and dispatch.action.type in INPUT_TYPES:
                self.current, self.claiming = dispatch, True
                self._claim(dispatch, functools.partial(self._claimed, dispatch))
                logger.info("{} attempt {} claimed", dispatch.action.action_id,
                            dispatch.attempt_id)
                return
            self._begin(dispatch)

    def _claimed(self, dispatch: DispatchAction, granted: bool, why: str | None) -> None:
        if self.current is not dispatch or not self.claiming:
            return  # answered twice, or we stopped meanwhile
        self.claiming = False
        if granted and not self._stopping():
            self._begin(dispatch)
            if self.current is not None:
                return
        else:
            self.current = None
            logger.warning("{} attempt {} not run: {}", dispatch.action.action_id,
                           dispatch.attempt_id, why_not(why))
            newer = self._newer.pop(key(dispatch), None)
            if newer is not None and granted is False:
                self.queued.appendleft(newer)  # the attempt that replaced it
        self.start_next()

    def _begin(self, dispatch: DispatchAction) -> None:
        """Mark ``dispatch`` started on disk, then hand it to the executor."""
        try:
            self.ledger.begin(dispatch)  # durable before any input (D5)
        except (sqlite3.Error, LedgerConflict) as exc:
            # Without the started mark we cannot promise exactly-once: do not execute.
            # (A conflict cannot happen, _answering just looked: a bug, never run blind.)
            logger.exception("ledger write failed for {}", dispatch.action.action_id)
            report = build_report(dispatch, ActionOutcome.failure(
                f"ledger_error:{exc}"[:300], needs_human=True, input_performed="none"))
            self._send(encode_report(report))  # nothing ran: there is nothing to record
            self.current = None
            return
        logger.info("executing {} {}", dispatch.action.type, dispatch.action.action_id)
        self.current = dispatch
        self._execute(dispatch)

    @property
    def executing(self) -> DispatchAction | None:
        """The dispatch the executor runs now (not one still being claimed)."""
        return None if self.claiming else self.current

    def holding(self) -> list[str]:
        """The attempts this agent has (claiming, executing, queued, or re-delivered)."""
        held = [d.attempt_id for d in (self.current, *self.queued) if d is not None]
        return held + [d.attempt_id for d in self._newer.values()]

    def finish(self, dispatch: DispatchAction, outcome: ActionOutcome,
               executed_at: float) -> None:
        """The execution of ``dispatch`` ended: record and send its report, start the next."""
        action_id = dispatch.action.action_id
        self.current = None
        report = build_report(dispatch, outcome, executed_at)
        logger.info("{} done: success={} error={} warning={}", action_id, report.success,
                    report.error, report.warning)
        try:
            sent = self.ledger.finish(dispatch.replay_id, action_id, report)
            newer = self._newer.pop(key(dispatch), None)
            if newer is not None:
                report = readdress(report, newer)
                sent = self.ledger.queue_report(report)
        except Exception:  # C1: the report goes out even if the disk fails us
            logger.exception("recording {} in the ledger failed; reporting anyway", action_id)
            sent = encode_report(report)
        self._send(sent)
        self.start_next()

    def after_restart(self, entry: LedgerEntry) -> LedgerEntry | None:
        """Started by a process that died before finishing. An input action may or may not
        have reached the screen: reported indeterminate, a person must check (the entry
        returned). An action without input (wait, verify_screen) has no effect to repeat:
        forgotten (None), it runs again when the dispatcher re-sends it."""
        if entry.action_type in INPUT_TYPES:
            return self.recover(entry)
        if self.ledger.forget_unfinished(*entry.key):
            logger.warning("{} ({}) was cut by a restart: it has no input, it runs again when"
                           " re-sent", entry.action_id, entry.action_type)
        return None

    def recover(self, entry: LedgerEntry) -> LedgerEntry:
        """An input action started by a process that died before finishing: report it as
        indeterminate."""
        logger.warning("{} ({}) was started but never finished before a restart: reporting"
                       " it indeterminate, a person must check", entry.action_id,
                       entry.action_type)
        self.ledger.finish(entry.replay_id, entry.action_id, indeterminate_report(entry))
        found = self.ledger.lookup(*entry.key)
        assert found is not None  # just written
        return found


def why_not(why: str | None) -> str:
    """Why a claimed attempt is not run, for the log."""
    if why is None:
        return "we are stopping"
    return "its grant came too late" if why == GRANT_EXPIRED else f"the dispatcher says {why}"
