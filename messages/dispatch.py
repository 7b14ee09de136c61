"""Dispatch conversation: dispatcher ↔ agent, and dispatcher ↔ watchdog
(docs/protocol.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from messages.base import Message
from messages.monitor import MonitorResolution
from messages.workflow import Action, TargetSpec


class DispatchMeta(Message):
    first_dispatched_at: float
    resent_count: int = 0
    last_resent_at: float = 0.0
    resend_reason: str | None = None


class DispatchAction(Message, type_name="action.dispatch"):
    """Dispatcher → ``agent.<machine_id>``: execute this action (answered by ActionReceived)."""

    replay_id: str
    session_id: str
    machine_id: str
    action: Action
    attempt_id: str
    dispatch_meta: DispatchMeta
    monitor_resolution: MonitorResolution | None = None
    agent_routes: bool = False
    """The agent finds the action's monitor itself, by the monitor router's rule
    (:func:`workflow.monitors.route`) on its own screen at the moment of the action, and says
    which in its report (``ActionReport.monitor_resolution``): the dispatcher did not ask the
    router (docs/screens-and-pauses.md, "Monitor routing")."""
    supersedes: list[str] = Field(default_factory=list)
    """Action ids of the same replay that this dispatch redoes, each of which may or may not
    have run (a step given up by the watchdog, then resumed): one step with this one. The
    agent must not execute this dispatch if any of them is in its ledger (it answers with
    that outcome instead), and must not execute any of them after this one."""

    @model_serializer(mode="wrap")
    def _omit_empty_supersedes(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Sent only when set: an agent older than the field (models forbid extra keys) keeps
        # taking every other dispatch from a newer dispatcher.
        # So is agent_routes: an older agent refuses a dispatch that sets it (no input).
        data = handler(self)
        if not self.supersedes and isinstance(data, dict):
            data.pop("supersedes", None)
        if not self.agent_routes and isinstance(data, dict):
            data.pop("agent_routes", None)
        return data


class ClaimAttempt(Message, type_name="action.claim"):
    """Agent → dispatcher, before any input of an attempt: may it run now?

    Granted only to the attempt in flight (:class:`ClaimReply`); a copy the watchdog resent
    or gave up, or of a cancelled replay, is refused and never runs.
    """

    replay_id: str
    machine_id: str
    action_id: str
    attempt_id: str


class ClaimReply(Message, type_name="action.claim_reply"):
    granted: bool
    reason: str | None = None  # why not: not_current, wrong_machine, paused, verdict_pending,
    # resend_due
    valid_s: float | None = Field(None, gt=0)
    """Granted: how long after the agent asked the grant may still be acted on (the
    watchdog's patience left for the attempt); None: no limit (no watchdog, or a dispatcher
    older than the field). A grant read later is not acted on (docs/protocol.md, "Writing
    an agent")."""
    retry_in_s: float | None = Field(None, gt=0, le=60)
    """Not refused, not yet: claim again after this long (twice as long each time). Set
    while a loop verdict on the step before is pending
    (actors/dispatcher/machine/consult_inputs.py); the verdict usually comes within milliseconds."""


class ActionProgress(Message, type_name="action.progress"):
    """Agent → dispatcher: an attempt is still under way, in a known state, for a while.

    Sent when a window guard starts waiting for a person (RPA_HUMAN_CORRECTION_TIMEOUT_S): the
    dispatcher shows the state and gives the watchdog ``hold_s`` more patience for this
    attempt, so a step waiting for a person is not taken for a lost one. Answered by Ack.
    """

    replay_id: str
    machine_id: str
    action_id: str
    attempt_id: str
    state: str = Field(min_length=1, max_length=64)  # e.g. awaiting_human_correction
    detail: dict[str, Any] = Field(default_factory=dict)
    hold_s: float = Field(0.0, ge=0.0, le=3600.0)


class ActionReceived(Message, type_name="action.received"):
    """Agent → dispatcher, the reply to a dispatch: this attempt is in the hands of agent
    process ``instance_id`` (its hello's): a hello from that same process does not make the
    dispatcher send it again (actors/dispatcher/process.py)."""

    action_id: str
    attempt_id: str
    instance_id: str | None = Field(None, max_length=128)

    @model_serializer(mode="wrap")
    def _omit_no_instance(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Sent only when set: a dispatcher older than the field (models forbid extra keys)
        # still reads the receipt, and agents that do not name themselves stay as they were.
        data = handler(self)
        if self.instance_id is None and isinstance(data, dict):
            data.pop("instance_id", None)
        return data


Box = tuple[float, float, float, float]
"""``(x, y, w, h)`` as fractions (0-1) of a report's screenshot area."""


class ActionSite(Message):
    """Where an action acted, as the agent knows it, in fractions of the screenshot area
    (the point itself is ``actual_position``): the foreground window, and where keyboard
    input goes (the caret, else the focused control, else the focus window: X11 says no
    finer). The loop detector judges progress there first (docs/loop-detection.md)."""

    window: Box | None = None
    focus: Box | None = None

    @field_validator("window", "focus")
    @classmethod
    def _inside(cls, box: Box | None) -> Box | None:
        if box is not None and not (all(-0.01 <= v <= 1.01 for v in box)
                                    and box[2] > 0 and box[3] > 0):
            raise ValueError("a site box is (x, y, w, h) within 0-1, w and h > 0")
        return box


InputPerformed = Literal["none", "performed", "unknown"]
"""Whether an attempt's input reached the workstation: ``none`` (refused or failed before its
first input event), ``performed`` (at least one input event was sent), ``unknown`` (it failed
while sending one, or the agent cannot tell). Only ``none`` may be retried automatically
(docs/architecture.md, "The life of an action")."""


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to, as the executor that ran it says: the fields an
    :class:`ActionReport` adds to its address, defined here once. The agent's executors return
    them (``agent.executors.base.ActionOutcome``, which adds ``input_performed``); the report
    carries them (pydantic takes a dataclass base's fields as the model's own).

    Screenshots are PNG bytes; msgpack carries them as binary (no base64 on the wire).
    """

    success: bool
    error: str | None = None
    warning: str | None = None
    screenshot_before: bytes | None = None
    screenshot_after: bytes | None = None
    actual_position: dict[str, float] | None = None
    resolution_method: str | None = None
    resolution_score: float | None = None
    resolution_elapsed_ms: float | None = None
    resolution_box: dict[str, float] | None = None  # where the target was read: x, y, w, h
    target_description: str | None = None
    target_spec: TargetSpec | None = None
    correction: dict[str, Any] | None = None
    system_dialog: dict[str, Any] | None = None
    needs_human: bool = False
    site: ActionSite | None = None
    """Where the input went (foreground window, focus), when the platform can say."""
    output_value: Annotated[str | None, Field(max_length=10_000)] = None
    """A ``read_text`` step: the text read where the step looks (also when it does not fit
    the step's pattern), judged again by the dispatcher (docs/protocol.md, "Outputs")."""
    monitor_resolution: MonitorResolution | None = None
    """The monitor the agent found for a dispatch it routed itself
    (``DispatchAction.agent_routes``, agent/executors/desktop_target.py: ``routed_here``)."""


class ActionReport(Message, Outcome, type_name="action.report"):
    """Agent → dispatcher: the outcome of one attempt (docs/protocol.md); retried until acked.
    Its outcome's fields are :class:`Outcome`'s."""

    replay_id: str
    session_id: str
    machine_id: str
    action_id: str
    attempt_id: str
    executed_at: float | None = None
    input_performed: InputPerformed | None = None
    """Said by every agent of this version; None (an older agent) is taken as ``unknown``
    for a failed input action (actors/dispatcher/machine/rules.py: ``input_state``)."""

    @model_serializer(mode="wrap")
    def _omit_unknowns(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Sent only when known: a dispatcher older than the fields keeps taking the reports.
        data = handler(self)
        if isinstance(data, dict):
            for name in ("site", "input_performed", "output_value", "monitor_resolution"):
                if getattr(self, name) is None:
                    data.pop(name, None)
        return data


class ReportAck(Message, type_name="action.report_ack"):
    """``accepted`` applied; ``duplicate``/``stale``/``unknown`` recorded and ignored."""

    action_id: str
    attempt_id: str
    status: Literal["accepted", "duplicate", "stale", "unknown"]


class AgentHello(Message, type_name="agent.hello"):
    """An agent (re)started or reconnected: resend what it should be doing, now."""

    machine_id: str = Field(min_length=1, max_length=128)
    instance_id: str
    pid: int
    # Attempts the agent holds (executing, queued, or reported and not yet acked): the
    # dispatcher does not send those again, their reports will come.
    holding: list[str] = Field(default_factory=list, max_length=4096)


class InFlight(Message):
    """One action waiting for its report, as the watchdog tracks it."""

    replay_id: str
    session_id: str
    machine_id: str
    action_id: str
    attempt_id: str
    action_type: str
    dispatched_at: float
    resent_count: int = 0
    patience_s: float = 0.0  # beyond the orphan timeout, for this attempt (ActionProgress)


class Track(Message, type_name="watchdog.track"):
    entry: InFlight


class Untrack(Message, type_name="watchdog.untrack"):
    action_id: str
    attempt_id: str


class TrackBatch(Message, type_name="watchdog.track_batch"):
    """Dispatcher → watchdog: Track and Untrack in the order decided, a few times a second.

    One request for many steps instead of two round trips per step (bench/turnaround.py):
    the watchdog's timers run for tens of seconds, a tenth of a second late changes nothing.
    """

    updates: list[Track | Untrack]


class ListTracked(Message, type_name="watchdog.list_tracked"):
    """→ watchdog: the attempts it times now (an InFlightList); for operators and tests."""


class ListInFlight(Message, type_name="dispatcher.list_inflight"):
    """Watchdog → dispatcher after a restart: every action in flight."""


class InFlightList(Message, type_name="dispatcher.inflight_list"):
    entries: list[InFlight]


class OrphanResend(Message, type_name="dispatcher.orphan_resend"):
    """Watchdog → dispatcher: no report in time; resend if that attempt is still current."""

    action_id: str
    attempt_id: str
    age_s: float
    position: Literal["head", "tail"] = "head"


class OrphanGiveUp(Message, type_name="dispatcher.orphan_giveup"):
    """Watchdog → dispatcher: resends exhausted; abandon if that attempt is still current."""

    action_id: str
    attempt_id: str
    age_s: float
    resent_count: int
