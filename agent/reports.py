"""Reports: building them, and sending requests again on a backoff until they are answered.

In MDP a worker's FINAL is fire-and-forget: nothing tells the worker it arrived, and a
broker restarted meanwhile drops it. So the outcome of an action does not travel as the
reply to the dispatch (that reply is only :class:`ActionReceived`); it is a request of its
own to the ``dispatcher`` service, answered by :class:`ReportAck` once recorded, and sent
again after 1, 3, 7, then every 7 seconds until then (docs/architecture.md). The same retrying
carries :class:`AgentHello`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from agent.executors.base import ActionOutcome
from agent.ledger import LedgerEntry
from messages.base import Message
from messages.codec import Envelope
from messages.dispatch import ActionReport, DispatchAction
from transport.client import CallFailed, Client

BACKOFF_S: tuple[float, ...] = (1.0, 3.0, 7.0)
"""Wait before each re-send; the last one repeats for ever."""

ALREADY_EXECUTED = "already_executed"
INDETERMINATE = "indeterminate_after_restart"


def backoff(sent: int) -> float:
    """How long to wait for an answer to the ``sent``-th send (0-based)."""
    return BACKOFF_S[min(sent, len(BACKOFF_S) - 1)]


def build_report(dispatch: DispatchAction, outcome: ActionOutcome,
                 executed_at: float | None = None) -> ActionReport:
    """The report of one attempt, addressed from the dispatch it answers."""
    return ActionReport(
        replay_id=dispatch.replay_id, session_id=dispatch.session_id,
        machine_id=dispatch.machine_id, action_id=dispatch.action.action_id,
        attempt_id=dispatch.attempt_id, executed_at=executed_at, **outcome.report_fields())


def indeterminate_report(entry: LedgerEntry) -> ActionReport:
    """For an action found started but unfinished after a restart: we cannot know whether
    its input happened, so we say so and ask for a person instead of guessing."""
    return ActionReport(
        replay_id=entry.replay_id, session_id=entry.session_id, machine_id=entry.machine_id,
        action_id=entry.action_id, attempt_id=entry.attempt_id, success=False,
        error=INDETERMINATE, needs_human=True,
        target_description=(f"the agent restarted while executing this {entry.action_type} "
                            "action: check the screen before resuming"))


def readdress(report: ActionReport, dispatch: DispatchAction) -> ActionReport:
    """``report`` answering a re-delivery ``dispatch`` of the same action, i.e. the same
    ``action_id`` in the same replay (cases g, k), or of another action id of the same step
    (a resume superseding it, or a stale copy of a superseded id).

    It keeps the original outcome and gets warning ``already_executed``, except an
    indeterminate one: claiming it executed would be a guess.
    """
    if (dispatch.attempt_id, dispatch.action.action_id) == (report.attempt_id,
                                                            report.action_id):
        return report  # the very attempt it answers: a transport duplicate
    warning = report.warning if report.error == INDETERMINATE else ALREADY_EXECUTED
    return report.model_copy(update={
        "action_id": dispatch.action.action_id, "attempt_id": dispatch.attempt_id,
        "replay_id": dispatch.replay_id, "session_id": dispatch.session_id,
        "machine_id": dispatch.machine_id, "warning": warning,
    })


OnReply = Callable[[Message], bool]
"""Given an answer, True if it settles the request, False to keep re-sending."""


@dataclass(slots=True)
class _Entry:
    service: str
    message: Message
    msg_id: str
    on_reply: OnReply
    sent: int = 0
    sent_at: float = 0.0
    due_at: float | None = 0.0  # None while waiting for an answer or its timeout


class Retrying:
    """Requests keyed by name, each re-sent with the same envelope id until settled.

    A new request under a key replaces the old one (whose late answer is then ignored).
    Everything runs on the owner's loop: call :meth:`tick` when :meth:`next_deadline` is due.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._entries: dict[str, _Entry] = {}

    def send(self, key: str, service: str, message: Message, msg_id: str,
             on_reply: OnReply, delay_s: float = 0.0) -> None:
        """Send now, or after ``delay_s`` (at a :meth:`tick`)."""
        entry = _Entry(service, message, msg_id, on_reply)
        self._entries[key] = entry
        now = time.monotonic()
        if delay_s > 0:
            entry.due_at = now + delay_s
        else:
            self._fire(key, entry, now)

    def cancel(self, key: str) -> None:
        self._entries.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _fire(self, key: str, entry: _Entry, now: float) -> None:
        timeout = backoff(entry.sent)
        entry.sent += 1
        entry.sent_at = now
        entry.due_at = None
        if entry.sent > 1:
            logger.info("re-sending {} to {} (try {}, next wait {:.0f}s)", key, entry.service,
                        entry.sent, timeout)

        def answered(reply: Envelope[Message] | None, error: CallFailed | None) -> None:
            self._answered(key, entry, reply, error)

        self.client.call(entry.service, entry.message, answered, timeout_s=timeout,
                         retries=0, msg_id=entry.msg_id)

    def _answered(self, key: str, entry: _Entry, reply: Envelope[Message] | None,
                  error: CallFailed | None) -> None:
        if self._entries.get(key) is not entry:
            return  # replaced or settled meanwhile
        now = time.monotonic()
        if reply is None:
            entry.due_at = now  # the wait is over: send again at the next tick
            return
        try:
            settled = entry.on_reply(reply.body)
        except Exception:  # a bug in a callback must not stop the retrying of others
            logger.exception("handling the answer to {} failed", key)
            settled = False
        if settled:
            if self._entries.get(key) is entry:  # on_reply may have sent anew under key
                del self._entries[key]
        else:
            # Answered, but not as hoped (an error): wait out this try's delay anyway so a
            # refusing dispatcher is not flooded.
            entry.due_at = entry.sent_at + backoff(entry.sent - 1)

    def tick(self, now: float) -> None:
        for key, entry in list(self._entries.items()):
            if entry.due_at is not None and entry.due_at <= now:
                self._fire(key, entry, now)

    def next_deadline(self) -> float | None:
        due = [e.due_at for e in self._entries.values() if e.due_at is not None]
        return min(due) if due else None
