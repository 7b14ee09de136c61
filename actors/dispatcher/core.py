"""The dispatcher's pure core: the action state machine (docs/architecture.md).

Every public method takes one input and the current time and returns a :class:`Decision`
(reply, effects, the replays to write, and whether it must be durable before its reply
leaves). No sockets, no clock, no uuid: ``now`` is given and ids come from ``new_id``. The
shell stages a durable decision in the turn's transaction, commits, then performs its
effects (docs/durability.md).

:class:`DispatcherCore` owns the state (a :class:`~actors.dispatcher.machine.book.ReplayBook`) and
opens one transaction (:class:`~actors.dispatcher.machine.book.Tx`) per input; the input is decided
by a plain function of the handler module named beside each method (``agent_inputs``,
``control_inputs``, ``watchdog_inputs``, ``consult_inputs``), made of the steps of
``steps``.

The rules it decides (one action in flight per session, which report is applied, retries,
resends, pauses, resumes, how a replay ends) are written once, in docs/architecture.md, "The
life of an action"; "Who decides each rule" there names the function deciding each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.dispatcher.machine import (
    agent_inputs,
    consult_inputs,
    control_inputs,
    queue_deadlines,
    queue_inputs,
    rules,
    watchdog_inputs,
)
from actors.dispatcher.machine.book import ReplayBook
from actors.dispatcher.machine.decision import Decision
from actors.dispatcher.machine.state import DispatcherConfig, DispatcherState, ReplayState
from messages.base import Message
from messages.dispatch import (
    ActionProgress,
    ActionReport,
    AgentHello,
    ClaimAttempt,
    ListInFlight,
    OrphanGiveUp,
    OrphanResend,
)
from messages.queue import (
    AddItems,
    AgentAvailable,
    CreateQueue,
    GetItem,
    ItemCommand,
    ListQueues,
    ShowQueue,
)
from messages.replay import (
    Ack,
    CancelReplay,
    GetReplayStatus,
    PauseReplay,
    ResumeReplay,
    SafetyCheck,
    StartReplay,
)


class DispatcherCore:
    """Owns replays, queues and in-flight actions; decides, never performs."""

    def __init__(self, config: DispatcherConfig, new_id: Callable[[], str],
                 state: DispatcherState | None = None) -> None:
        self.book = ReplayBook(config, new_id, state)
        self.book.settle = queue_inputs.settle

    @property
    def config(self) -> DispatcherConfig:
        return self.book.config

    @property
    def state(self) -> DispatcherState:
        return self.book.state

    @property
    def replays(self) -> dict[str, ReplayState]:
        """The replays in memory, by id (read them; the handlers change them)."""
        return self.book.replays

    def check_invariants(self, decision: Decision | None = None) -> None:
        """Raise AssertionError naming the first broken invariant (I1-I6 and ours)."""
        self.book.check_invariants(decision)

    # People (control_inputs) --------------------------------------------------------------

    def start(self, msg: StartReplay, now: float) -> Decision:
        return control_inputs.start(self.book.begin(now), msg)

    def status(self, msg: GetReplayStatus, now: float = 0.0) -> Decision:
        return control_inputs.status(self.book, msg)

    def resume(self, msg: ResumeReplay, now: float) -> Decision:
        return control_inputs.resume(self.book.begin(now), msg)

    def cancel(self, msg: CancelReplay, now: float) -> Decision:
        return control_inputs.cancel(self.book.begin(now), msg)

    def pause(self, replay_id: str, reason: str, message: str, now: float,
              safety_checks: list[SafetyCheck] | None = None,
              detail: dict[str, Any] | None = None) -> Decision:
        return control_inputs.pause(self.book.begin(now), replay_id, reason, message,
                                    safety_checks, detail)

    def operator_pause(self, msg: PauseReplay, now: float) -> Decision:
        """Operator pause (D8): from the next step; the action in flight is not cancelled."""
        text = rules.operator_pause_message(msg.operator, msg.message)
        return self.pause(msg.replay_id, rules.OPERATOR, text, now,
                          detail={"operator": msg.operator, **msg.by()})

    def recover(self, now: float) -> Decision:
        return control_inputs.recover(self.book.begin(now))

    def refused(self, reply: Message, now: float, **data: object) -> Decision:
        """A request the shell refused (who may ask what): its audit record, then the reply."""
        tx = self.book.begin(now)
        tx.audit("request_refused", **data)
        return tx.done(reply)

    # Agents (agent_inputs) ----------------------------------------------------------------

    def report(self, msg: ActionReport, sender_machine: str, now: float) -> Decision:
        return agent_inputs.report(self.book.begin(now), msg, sender_machine)

    def claim(self, msg: ClaimAttempt, sender_machine: str, now: float) -> Decision:
        return agent_inputs.claim(self.book, msg, sender_machine, now)

    def progress(self, msg: ActionProgress, sender_machine: str, now: float) -> Decision:
        return agent_inputs.progress(self.book.begin(now), msg, sender_machine)

    def agent_hello(self, msg: AgentHello, now: float,
                    underway: frozenset[str] = frozenset()) -> Decision:
        return agent_inputs.agent_hello(self.book.begin(now), msg, underway)

    # Work queues (queue_inputs) ---------------------------------------------------------

    def create_queue(self, msg: CreateQueue, now: float) -> Decision:
        return queue_inputs.create(self.book.begin(now), msg)

    def add_items(self, msg: AddItems, now: float) -> Decision:
        return queue_inputs.add(self.book.begin(now), msg)

    def list_queues(self, msg: ListQueues, now: float) -> Decision:
        return queue_inputs.list_queues(self.book, msg, now)

    def show_queue(self, msg: ShowQueue, now: float) -> Decision:
        return queue_inputs.show(self.book, msg, now)

    def get_item(self, msg: GetItem, now: float = 0.0) -> Decision:
        return queue_inputs.get_item(self.book, msg)

    def item_command(self, msg: ItemCommand, now: float) -> Decision:
        return queue_inputs.command(self.book.begin(now), msg)

    def agent_available(self, msg: AgentAvailable, now: float) -> Decision:
        return queue_inputs.available(self.book.begin(now), msg)

    def check_deadlines(self, now: float) -> Decision:
        tx = self.book.begin(now)
        queue_deadlines.check(tx)
        return tx.done(Ack(status="checked"))

    # The watchdog (watchdog_inputs) -------------------------------------------------------

    def inflight(self, msg: ListInFlight | None = None, now: float = 0.0) -> Decision:
        return watchdog_inputs.inflight(self.book)

    def orphan_resend(self, msg: OrphanResend, now: float) -> Decision:
        return watchdog_inputs.orphan_resend(self.book.begin(now), msg)

    def orphan_giveup(self, msg: OrphanGiveUp, now: float) -> Decision:
        return watchdog_inputs.orphan_giveup(self.book.begin(now), msg)

    # Consulted actors (consult_inputs) ----------------------------------------------------

    def consulted(self, replay_id: str, token: str, answer: Message | None,
                  error: str | None, now: float) -> Decision:
        return consult_inputs.consulted(self.book.begin(now), replay_id, token, answer, error)
