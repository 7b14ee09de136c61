"""What the agent asks the dispatcher: reports, claims, progress and hello.

Each is a request to the ``dispatcher`` service, encoded once and kept in the agent's
retrying :class:`~agent.protocol.outbox.Outbox`, sent again until it is answered as hoped (a report
until its ack, which the ledger records). A report is sent as the ledger recorded it (its
bytes and envelope id), never encoded again. The agent process (agent/process.py) decides when to
ask; this says what.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from loguru import logger

from agent.protocol.ledger import Ledger, OutboxReport
from agent.protocol.outbox import OnReply, Outbox
from messages.base import Message
from messages.codec import encode, new_id
from messages.control import ErrorReply
from messages.dispatch import (
    ActionProgress,
    AgentHello,
    ClaimAttempt,
    ClaimReply,
    DispatchAction,
    ReportAck,
)
from messages.queue import AgentAvailable

DISPATCHER = "dispatcher"
PROGRESS_MARGIN_S = 30.0
"""Beyond the time an action says it may wait for a person, before the watchdog worries."""
CLAIM_WAIT_MAX_S = 0.5
"""The longest wait between two claims the dispatcher answered "not yet"."""
GRANT_EXPIRED = "grant_expired"
"""Why a granted attempt is not run: the grant was read too late (:func:`late`)."""


def late(reply: ClaimReply, waited_s: float) -> bool:
    """Whether a grant read ``waited_s`` after its claim was asked is past what it is good
    for: it waited in a frozen process or socket while the watchdog may have resent the step
    or given it up, and no input may follow the pause that follows (docs/protocol.md,
    "Writing an agent")."""
    return reply.valid_s is not None and waited_s >= reply.valid_s


class Asks:
    """The agent's requests to the dispatcher, through ``outbox``."""

    def __init__(self, outbox: Outbox, ledger: Ledger, machine_id: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.outbox = outbox
        self.ledger = ledger
        self.machine_id = machine_id
        self._clock = clock
        self.hello_answered_at: float | None = None  # wall clock (agent/status.py)

    def _ask(self, key: str, message: Message, on_reply: OnReply,
             delay_s: float = 0.0) -> None:
        msg_id = new_id()
        self.outbox.send(key, DISPATCHER, encode(message, msg_id), msg_id, on_reply, delay_s)

    def report(self, sent: OutboxReport) -> None:
        """Send the report ``sent`` (as the ledger recorded it) until it is acked."""
        replay_id, action_id, attempt_id = sent.replay_id, sent.action_id, sent.attempt_id

        def on_reply(body: Message) -> bool:
            if isinstance(body, ReportAck) and (body.action_id, body.attempt_id) == (
                    action_id, attempt_id):
                logger.info("report {} attempt {} acked: {}", action_id, attempt_id,
                            body.status)
                try:
                    self.ledger.acked(replay_id, action_id, attempt_id)
                except sqlite3.Error:
                    logger.exception("recording the ack of {} failed", action_id)
                return True
            logger.warning("report {} answered with {!r}, not an ack: will send again",
                           action_id, body)
            return False

        # One pending report per action of a replay: a newer attempt's report replaces an
        # older one, another replay's report of the same step does not.
        self.outbox.send(f"report:{replay_id}:{action_id}", DISPATCHER, sent.data, sent.msg_id,
                         on_reply)

    def claim(self, dispatch: DispatchAction, done: Callable[[bool, str | None], None],
              wait_s: float = 0.0) -> None:
        """Ask whether ``dispatch`` may run now (agent/protocol/serve.py), in ``wait_s``; asked
        again, twice as late each time, while the dispatcher answers "not yet"."""
        claim = ClaimAttempt(replay_id=dispatch.replay_id, machine_id=self.machine_id,
                             action_id=dispatch.action.action_id,
                             attempt_id=dispatch.attempt_id)
        asked_at = self._clock()  # before the claim is sent: errs toward a late grant

        def on_reply(body: Message) -> bool:
            if isinstance(body, ClaimReply) and not body.granted and body.retry_in_s:
                self.claim(dispatch, done, min(CLAIM_WAIT_MAX_S,
                                               max(body.retry_in_s, 2 * wait_s)))
            elif isinstance(body, ClaimReply) and body.granted and late(
                    body, self._clock() - asked_at):
                logger.warning("{} attempt {}: its grant is read {:.1f} s after the claim,"
                               " beyond the {:.1f} s it is good for", dispatch.action.action_id,
                               dispatch.attempt_id, self._clock() - asked_at, body.valid_s)
                done(False, GRANT_EXPIRED)
            elif isinstance(body, ClaimReply):
                done(body.granted, body.reason)
            elif isinstance(body, ErrorReply) and body.code == "unsupported_type":
                done(True, None)  # a dispatcher older than claims: it never refuses
            else:
                logger.warning("claim of {} answered with {!r}: asking again",
                               dispatch.action.action_id, body)
                return False
            return True

        # Keyed by attempt: the claim of the next attempt may be sent from this one's answer.
        self._ask(f"claim:{dispatch.attempt_id}", claim, on_reply, delay_s=wait_s)

    def progress(self, dispatch: DispatchAction, info: dict[str, Any]) -> None:
        """Tell that ``dispatch`` is still under way (waiting for a person, ``info``)."""
        timeout = info.get("timeout_s")
        hold = float(timeout) + PROGRESS_MARGIN_S if isinstance(timeout, int | float) else 0
        progress = ActionProgress(
            replay_id=dispatch.replay_id, machine_id=self.machine_id,
            action_id=dispatch.action.action_id, attempt_id=dispatch.attempt_id,
            state=str(info.get("state", "in_progress"))[:64],
            detail={k: v for k, v in info.items() if k != "state"},
            hold_s=min(max(hold, 0.0), 3600.0))
        self._ask(f"progress:{dispatch.attempt_id}", progress, lambda _body: True)

    def available(self, instance_id: str, pool: str) -> None:
        """Say we are alive and which pool we serve (docs/queues.md); one pending at most."""
        self._ask("available", AgentAvailable(machine_id=self.machine_id,
                                              instance_id=instance_id, pool=pool),
                  lambda _body: True)

    def hello(self, instance_id: str, holding: list[str]) -> None:
        """Say we are here, and which attempts we hold (``holding`` and the reports not
        acked yet): the dispatcher re-sends the others at once."""
        unacked = [e.outbox_attempt for e in self.ledger.unacked() if e.outbox_attempt]
        hello = AgentHello(machine_id=self.machine_id, instance_id=instance_id,
                           pid=os.getpid(), holding=[*holding, *unacked])

        def on_reply(body: Message) -> bool:
            if isinstance(body, ErrorReply):
                logger.warning("dispatcher answered hello with an error: {} {}", body.code,
                               body.message)
            else:
                logger.info("dispatcher answered hello")
            self.hello_answered_at = time.time()
            return True  # any answer means a dispatcher heard us

        self._ask("hello", hello, on_reply)
