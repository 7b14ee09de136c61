"""The dispatcher's state as plain data: replays, their queues, the action in flight, pauses.

A replay's queue is not stored as a list: it is the workflow's actions from ``cursor`` on,
preceded by ``inserted`` (the ``_retry{N}`` / ``_resume`` actions pushed at the head). The
workflow is immutable and stored once; everything else is the small mutable part that the
store rewrites on every transition (see :func:`mutable_dump`), ``supersedes`` included: a
resume dispatched again after a restart must still carry the ids it redoes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from actors.dispatcher.machine.rules import base_id
from messages.dispatch import DispatchMeta, InFlight
from messages.outputs import ReadText
from messages.replay import Mode, ReplayStatusName, ReplaySummary, SafetyCheck
from messages.workflow import INPUT_TYPES, Action, Workflow
from workflow.inputs import secrets, shown_values, substitute
from workflow.outputs import as_values, reads, secret_outputs, shown_outputs

TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
PAUSED: Literal["paused_need_help"] = "paused_need_help"


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    """Business limits of the core (the watchdog's timers live in the watchdog)."""

    # MAX_RETRIES_PER_ACTION: retries of a failure whose input did not go out.
    max_retries_per_action: int = 3
    dead_client_count: int = 2  # give-ups ...
    dead_client_period_s: float = 60.0  # ... within this period on one session pause it
    max_finished_replays: int = 1000  # finished replays kept in memory for status queries
    # Other actors consulted on a replay's way (consult.py); off here so that the core alone
    # runs as docs/architecture.md describes; the process turns them on from the environment.
    loop_detector: bool = False  # RPA_LOOP_DETECTOR_ENABLED: a verdict after every report
    agent_routes: bool = False  # LEA_DISPATCHER_AGENT_ROUTES: the agent finds a click's monitor
    safety_checks: bool = False  # the pause payload (checks) from the safety_checks actor
    loop_timeout_s: float = 2.0  # RPA_LOOP_DETECTOR_TIMEOUT_S
    route_timeout_s: float = 1.0
    payload_timeout_s: float = 7.0  # RPA_SAFETY_CHECKS_LLM_TIMEOUT_S (5) + 2
    llm_timeout_s: float = 5.0  # RPA_SAFETY_CHECKS_LLM_TIMEOUT_S: a fresh capture counts in it
    llm_fail_closed: bool = False  # RPA_SAFETY_CHECKS_LLM_FAIL_MODE=closed
    llm_enabled: bool = False  # RPA_SAFETY_CHECKS_LLM_ENABLED
    # An agent not heard from (agent.available) for this long is offline: no work item
    # goes to it (docs/queues.md). Agents tell every AVAILABLE_EVERY_S (agent/process.py).
    agent_seen_s: float = 3.5
    # RPA_WATCHDOG_ORPHAN_TIMEOUT_S when the watchdog runs (None: it does not): how long a
    # granted claim stays good (agent_inputs.claim, docs/protocol.md, "Writing an agent").
    orphan_timeout_s: float | None = None


class Resolution(NamedTuple):
    """How a dispatched action_id ended: its report was accepted, or it was abandoned."""

    outcome: Literal["acked", "abandoned"]
    attempt_id: str


@dataclass(slots=True)
class InFlightEntry:
    """The one action of a replay waiting for its report (DISPATCHED in docs/architecture.md)."""

    action: Action
    attempt_id: str
    machine_id: str
    first_dispatched_at: float
    dispatched_at: float  # of the current attempt: the watchdog's clock starts here
    resent_count: int = 0  # every resend, whatever its reason (dispatch_meta, for people)
    orphan_resends: int = 0  # watchdog resends only: the budget the watchdog counts
    last_resent_at: float = 0.0
    resend_reason: str | None = None
    monitor_resolution: dict[str, Any] | None = None  # as the router answered, every copy
    claimed: bool = False  # the agent was told to go ahead (not stored: see agent_inputs.claim)
    progress: str | None = None  # the agent's last ActionProgress state (not stored)
    patience_s: float = 0.0  # and the watchdog's extra patience it asked for

    def meta(self) -> DispatchMeta:
        return DispatchMeta(first_dispatched_at=self.first_dispatched_at,
                            resent_count=self.resent_count, last_resent_at=self.last_resent_at,
                            resend_reason=self.resend_reason)


@dataclass(slots=True)
class Awaiting:
    """A replay waiting for another actor's answer before its next step (consult.py)."""

    kind: Literal["loop", "route", "capture", "payload"]
    token: str  # the consultation; an answer carrying another one is stale
    since: float
    action: Action | None = None  # route: the action to dispatch; payload: the pause step


@dataclass(slots=True)
class PauseInfo:
    """Why a replay waits for a person, and what resuming it does."""

    reason: str
    message: str
    at: float
    action_id: str | None = None  # the step the pause is about, for people
    failed_action: Action | None = None  # rebuilt as ``{base}_resume`` at the head on resume
    counts_step: bool = False  # resuming resolves that step (a pause_for_human)
    safety_checks: list[SafetyCheck] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ReplayState:
    """One replay: immutable head (ids, workflow, mode) and its mutable progress."""

    replay_id: str
    session_id: str
    machine_id: str
    workflow: Workflow
    mode: Mode
    operator: str | None
    seq: int  # creation order: replays of one session run one after the other in this order
    created_at: float
    updated_at: float
    status: ReplayStatusName = "running"
    cursor: int = 0  # next workflow action to take once ``inserted`` is empty
    inserted: list[Action] = field(default_factory=list)
    index: int = 0  # workflow steps resolved (acked, skipped, or abandoned and passed)
    completed_actions: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    inflight: InFlightEntry | None = None
    resolved: dict[str, Resolution] = field(default_factory=dict)  # append-only
    retries: dict[str, int] = field(default_factory=dict)  # base id -> retries made (naming)
    retry_budget: dict[str, int] = field(default_factory=dict)  # base id -> since last resume
    resumes: dict[str, int] = field(default_factory=dict)  # base id -> resumes made (naming)
    giveup_times: list[float] = field(default_factory=list)  # recent give-ups (dead client)
    # Queued or in-flight action id -> the abandoned ids of its step it redoes (sent in
    # DispatchAction.supersedes); dropped once that action is resolved.
    supersedes: dict[str, list[str]] = field(default_factory=dict)
    pause: PauseInfo | None = None
    checks_acknowledged: dict[str, Any] | None = None
    awaiting: Awaiting | None = None
    # The last screenshot an agent reported, for the safety checks' model, and a time it was
    # taken no earlier than (consult.screen_is_fresh); memory only.
    last_screenshot: bytes | None = None
    last_screenshot_at: float | None = None
    # Tokens of the loop verdicts asked and not answered yet, oldest first; memory only (a
    # verdict lost with a restart is not asked again). While any is pending, no input action
    # of this replay is granted its claim (consult_inputs.py).
    loop_pending: list[str] = field(default_factory=list)
    # The run's input values (workflow/inputs.py): put into each action as it is dispatched;
    # the workflow kept above has the placeholders.
    inputs: dict[str, str] = field(default_factory=dict)
    # What its read_text steps read, by output name (workflow/outputs.py): put into later
    # steps as {{outputs.name}} the same way.
    outputs: dict[str, str] = field(default_factory=dict)
    _reads: dict[str, ReadText] | None = None  # the workflow's read_text specs (memo)

    def reads(self) -> dict[str, ReadText]:
        """The outputs the workflow's read_text steps declare, by name."""
        if self._reads is None:
            self._reads = reads(self.workflow)
        return self._reads

    def read_spec(self, action_id: str) -> ReadText | None:
        """The read_text step ``action_id`` (a retry's or a resume's) is, if it is one."""
        base = base_id(action_id)
        step = next((a for a in self.workflow.actions if a.action_id == base), None)
        if step is None or step.type != "read_text":
            return None
        return self.reads().get(str(step.parameters.get("output")))

    def concrete(self, action: Action) -> Action:
        """``action`` as the agent performs it: with this run's input and output values."""
        return substitute(action, {**self.inputs, **as_values(self.outputs)})

    def shown(self, action: Action) -> Action:
        """``action`` as a person reads it (pause messages, check labels): with this run's
        values, a sensitive one masked."""
        return substitute(action, {**shown_values(self.workflow.inputs, self.inputs),
                                   **as_values(self.shown_outputs())})

    def shown_outputs(self) -> dict[str, str]:
        """The outputs read so far, a sensitive one masked."""
        return shown_outputs(self.reads(), self.outputs) if self.outputs else {}

    def secrets(self) -> list[str]:
        """The sensitive values of this run, masked in whatever its agent reports."""
        found = secrets(self.workflow.inputs, self.inputs)
        if self.outputs:
            found += secret_outputs(self.reads(), self.outputs)
        return sorted(set(found), key=len, reverse=True)

    @property
    def total(self) -> int:
        return len(self.workflow.actions)

    @property
    def active(self) -> bool:
        return self.status not in TERMINAL

    def queue_len(self) -> int:
        return len(self.inserted) + self.total - self.cursor

    def queue_ids(self) -> list[str]:
        rest = self.workflow.actions[self.cursor:]
        return [a.action_id for a in self.inserted] + [a.action_id for a in rest]

    def queue_head(self, n: int = 10) -> list[str]:
        """The ids of the next ``n`` queued actions (without building the whole queue)."""
        rest = self.workflow.actions[self.cursor:self.cursor + n]
        return [a.action_id for a in [*self.inserted[:n], *rest]][:n]

    def pop_head(self) -> Action | None:
        if self.inserted:
            return self.inserted.pop(0)
        if self.cursor < self.total:
            self.cursor += 1
            return self.workflow.actions[self.cursor - 1]
        return None

    def clear_queue(self) -> None:
        self.inserted = []
        self.cursor = self.total
        self.supersedes = {}

    def bump(self, counter: str, by: int = 1) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + by

    def tracked(self) -> InFlight:
        """The in-flight entry as the watchdog tracks it (its budget: orphan resends only)."""
        e = self.inflight
        if e is None:
            raise ValueError(f"replay {self.replay_id} has nothing in flight")
        return InFlight(replay_id=self.replay_id, session_id=self.session_id,
                        machine_id=e.machine_id, action_id=e.action.action_id,
                        attempt_id=e.attempt_id, action_type=e.action.type,
                        dispatched_at=e.dispatched_at, resent_count=e.orphan_resends,
                        patience_s=e.patience_s)

    def _action_state(self) -> str | None:
        """What the step in flight (or the replay) waits for, as ``replay status`` shows it."""
        e = self.inflight
        if e is None:
            return f"awaiting_{self.awaiting.kind}" if self.awaiting else None
        if (e.progress is None and self.loop_pending and not e.claimed
                and e.action.type in INPUT_TYPES):
            return "awaiting_loop_verdict"  # its input waits (consult_inputs.py)
        return e.progress

    def _waiting_ids(self, n: int = 10) -> tuple[int, list[str]]:
        """The actions waiting to be dispatched, as the status counts them: the queue, and
        before it the action taken off it for a consultation (a route, a pause's checks),
        which is neither queued nor in flight yet but still a step to go (I1)."""
        held = self.awaiting.action if self.awaiting is not None else None
        if held is None:
            return self.queue_len(), self.queue_head(n)
        return self.queue_len() + 1, [held.action_id, *self.queue_head(n)][:n]

    def _pause_step(self) -> Action | None:
        """The action the pause is about: the failed one kept for the resume, else the
        workflow's step of that id (a retry's or a resume's, by its base id)."""
        p = self.pause
        if p is None or p.action_id is None:
            return None
        if p.failed_action is not None and p.failed_action.action_id == p.action_id:
            return p.failed_action
        ids = (p.action_id, base_id(p.action_id))
        return next((a for a in self.workflow.actions if a.action_id in ids), None)

    def summary(self) -> ReplaySummary:
        p = self.pause
        step = self._pause_step()
        queue_length, queue_head = self._waiting_ids()
        return ReplaySummary(
            replay_id=self.replay_id, session_id=self.session_id, machine_id=self.machine_id,
            workflow_id=self.workflow.workflow_id, mode=self.mode, status=self.status,
            index=self.index, total=self.total, completed_actions=self.completed_actions,
            current_action_id=self.inflight.action.action_id if self.inflight else None,
            current_action_state=self._action_state(),
            queue_length=queue_length, queue_head=queue_head,
            pause_reason=p.reason if p else None, pause_message=p.message if p else None,
            pause_action_id=p.action_id if p else None,
            pause_intention=step.intention if step else None,
            workflow_name=self.workflow.name or None,
            current_intention=(self.inflight.action.intention if self.inflight else None) or (
                step.intention if step else None),
            safety_checks=list(p.safety_checks) if p else [], counters=dict(self.counters),
            checks_acknowledged=self.checks_acknowledged,
            created_at=self.created_at, updated_at=self.updated_at,
            outputs=self.shown_outputs())


@dataclass(slots=True)
class DispatcherState:
    """Everything the core owns; what the store loads and the core mutates."""

    replays: dict[str, ReplayState] = field(default_factory=dict)
    next_seq: int = 1


# Serialisation of the mutable part (msgpack-friendly dicts) --------------------------------

def _action(a: Action) -> dict[str, Any]:
    return a.model_dump(mode="json")


def mutable_dump(r: ReplayState) -> dict[str, Any]:
    """The part of a replay that changes per transition (not the workflow, not ``resolved``)."""
    e, p, a = r.inflight, r.pause, r.awaiting
    return {
        "status": r.status, "cursor": r.cursor, "inserted": [_action(a) for a in r.inserted],
        "index": r.index, "completed_actions": r.completed_actions, "counters": r.counters,
        "updated_at": r.updated_at, "retries": r.retries, "retry_budget": r.retry_budget,
        "resumes": r.resumes, "giveup_times": r.giveup_times, "supersedes": r.supersedes,
        "checks_acknowledged": r.checks_acknowledged, "inputs": r.inputs,
        "outputs": r.outputs,
        "inflight": None if e is None else {
            "action": _action(e.action), "attempt_id": e.attempt_id, "machine_id": e.machine_id,
            "first_dispatched_at": e.first_dispatched_at, "dispatched_at": e.dispatched_at,
            "resent_count": e.resent_count, "orphan_resends": e.orphan_resends,
            "last_resent_at": e.last_resent_at, "resend_reason": e.resend_reason,
            "monitor_resolution": e.monitor_resolution},
        "awaiting": None if a is None else {
            "kind": a.kind, "token": a.token, "since": a.since,
            "action": None if a.action is None else _action(a.action)},
        "pause": None if p is None else {
            "reason": p.reason, "message": p.message, "at": p.at, "action_id": p.action_id,
            "failed_action": None if p.failed_action is None else _action(p.failed_action),
            "counts_step": p.counts_step, "detail": p.detail,
            "safety_checks": [c.model_dump(mode="json") for c in p.safety_checks]},
    }


def mutable_restore(r: ReplayState, m: dict[str, Any]) -> None:
    """Apply a :func:`mutable_dump` onto a replay rebuilt from its immutable head."""
    r.status = m["status"]
    r.cursor, r.index = m["cursor"], m["index"]
    r.inserted = [Action.model_validate(a) for a in m["inserted"]]
    r.completed_actions, r.counters = m["completed_actions"], dict(m["counters"])
    r.updated_at = m["updated_at"]
    r.retries, r.retry_budget = dict(m["retries"]), dict(m["retry_budget"])
    r.resumes, r.giveup_times = dict(m["resumes"]), list(m["giveup_times"])
    # Absent from states stored before resumes carried the ids they redo.
    r.supersedes = {aid: list(ids) for aid, ids in m.get("supersedes", {}).items()}
    r.checks_acknowledged = m["checks_acknowledged"]
    r.inputs = dict(m.get("inputs", {}))  # absent from states stored before inputs
    r.outputs = dict(m.get("outputs", {}))  # and before outputs
    e, p = m["inflight"], m["pause"]
    r.inflight = None if e is None else InFlightEntry(
        action=Action.model_validate(e["action"]), attempt_id=e["attempt_id"],
        machine_id=e["machine_id"], first_dispatched_at=e["first_dispatched_at"],
        dispatched_at=e["dispatched_at"], resent_count=e["resent_count"],
        orphan_resends=e["orphan_resends"], last_resent_at=e["last_resent_at"],
        resend_reason=e["resend_reason"], monitor_resolution=e.get("monitor_resolution"))
    a = m.get("awaiting")  # absent from states stored before consultations
    r.awaiting = None if a is None else Awaiting(
        kind=a["kind"], token=a["token"], since=a["since"],
        action=None if a["action"] is None else Action.model_validate(a["action"]))
    r.pause = None if p is None else PauseInfo(
        reason=p["reason"], message=p["message"], at=p["at"], action_id=p["action_id"],
        failed_action=(None if p["failed_action"] is None
                       else Action.model_validate(p["failed_action"])),
        counts_step=p["counts_step"], detail=dict(p["detail"]),
        safety_checks=[SafetyCheck.model_validate(c) for c in p["safety_checks"]])
