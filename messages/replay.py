"""Control conversation: people and tools ↔ dispatcher (start, status, pause, resume, cancel)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from messages.base import Message
from messages.workflow import Workflow

Mode = Literal["supervised", "autonomous"]
ReplayStatusName = Literal["running", "paused_need_help", "completed", "failed", "cancelled"]
Role = Literal["viewer", "operator", "admin"]
"""An operator account's role in the console (console/accounts.py)."""


class ByPerson(Message):
    """Who sent a control command, beyond the ``operator`` name it gives: the console's
    signed-in ``account`` and its ``role``, or the ``os_user`` that ran the command line.
    The dispatcher records them beside ``operator`` in the audit trail."""

    account: str | None = Field(None, max_length=128)
    role: Role | None = None
    os_user: str | None = Field(None, max_length=128)

    def by(self) -> dict[str, str]:
        """The fields that are set, for an audit record or an event."""
        found = {"account": self.account, "role": self.role, "os_user": self.os_user}
        return {k: v for k, v in found.items() if v is not None}


class StartReplay(ByPerson, type_name="replay.start"):
    workflow: Workflow
    machine_id: str = Field(min_length=1, max_length=128)
    mode: Mode = "supervised"
    session_id: str | None = Field(None, max_length=128)
    operator: str | None = Field(None, max_length=128)
    inputs: dict[str, str] = Field(default_factory=dict, max_length=100)
    """The values of the workflow's declared inputs (messages/inputs.py), checked before
    anything is dispatched."""

    @model_serializer(mode="wrap")
    def _omit_no_inputs(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Sent only when given: a dispatcher older than the field keeps taking starts.
        data = handler(self)
        if not self.inputs and isinstance(data, dict):
            data.pop("inputs", None)
        return data


class ReplayStarted(Message, type_name="replay.started"):
    replay_id: str
    session_id: str
    status: ReplayStatusName


class GetReplayStatus(Message, type_name="replay.status"):
    """One replay by id, or every replay when ``replay_id`` is None."""

    replay_id: str | None = None


class SafetyCheck(Message):
    id: str
    label: str
    required: bool = True
    source: Literal["declarative", "llm_contextual", "system"] = "declarative"
    evidence: str | None = None


class ReplaySummary(Message):
    replay_id: str
    session_id: str
    machine_id: str
    workflow_id: str
    mode: Mode
    status: ReplayStatusName
    index: int
    total: int
    completed_actions: int
    current_action_id: str | None = None
    # What it is doing, when known: awaiting_human_correction (the agent's ActionProgress),
    # awaiting_route / awaiting_loop / awaiting_payload (another actor is consulted).
    current_action_state: str | None = None
    # Actions waiting to be dispatched, the one taken off the queue while another actor is
    # consulted about it (awaiting_route, awaiting_capture / _payload) first; the one in
    # flight is not one (I1: queued + in flight = steps left).
    queue_length: int = 0
    queue_head: list[str] = Field(default_factory=list)  # the next few of them, in order
    pause_reason: str | None = None
    pause_message: str | None = None
    # The step the pause is about (its action id as dispatched, a retry's or a resume's
    # included) and that step's intention when the workflow gives one.
    pause_action_id: str | None = None
    pause_intention: str | None = None
    # For people (the console's list): the workflow's name, and the intention of the step in
    # flight or of the one the pause is about, when the workflow gives them.
    workflow_name: str | None = None
    current_intention: str | None = None
    safety_checks: list[SafetyCheck] = Field(default_factory=list)
    # The last pause's acknowledgement: {ids, operator, at} (docs/architecture.md).
    checks_acknowledged: dict[str, Any] | None = None
    counters: dict[str, int] = Field(default_factory=dict)
    created_at: float
    updated_at: float
    outputs: dict[str, str] = Field(default_factory=dict)
    """What the run's read_text steps read, by output name; a sensitive one is ``•••``
    (docs/protocol.md, "Outputs")."""

    @model_serializer(mode="wrap")
    def _omit_no_pause_step(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Sent only when set: a peer older than these fields (models forbid extra keys) keeps
        # reading every status of a newer dispatcher but those that carry them.
        data = handler(self)
        if isinstance(data, dict):
            for name in ("pause_action_id", "pause_intention", "workflow_name",
                         "current_intention"):
                if data.get(name) is None:
                    data.pop(name, None)
            if not data.get("outputs"):
                data.pop("outputs", None)
        return data


class ReplayStatusReply(Message, type_name="replay.status_reply"):
    replays: list[ReplaySummary]


StepDecision = Literal["done", "redo"]


class ResumeReplay(ByPerson, type_name="replay.resume"):
    replay_id: str
    acknowledged_check_ids: list[str] = Field(default_factory=list)
    operator: str | None = Field(None, max_length=128)
    step: StepDecision | None = None
    """At a pause a failed step caused, what the person found: ``done`` (the step is done,
    by Léa or by hand: Léa goes on with the next one) or ``redo`` (Léa does it again). Unset:
    ``done`` when the step's input went out or may have (``failed_after_input``,
    ``input_unknown``: never redone unless a person says so), else ``redo``."""

    @model_serializer(mode="wrap")
    def _omit_no_step(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Sent only when set: a dispatcher older than the field keeps taking resumes.
        data = handler(self)
        if self.step is None and isinstance(data, dict):
            data.pop("step", None)
        return data


class ReplayResumed(Message, type_name="replay.resumed"):
    status: Literal["resumed"] = "resumed"
    replay_id: str
    session_id: str
    remaining_actions: int


class PauseReplay(ByPerson, type_name="replay.pause"):
    """An operator pause (D8): the action in flight finishes and its report is applied;
    nothing further is dispatched until a resume. Answered by :class:`Ack` ``paused``."""

    replay_id: str
    operator: str | None = Field(None, max_length=128)
    message: str | None = Field(None, max_length=2000)


class CancelReplay(ByPerson, type_name="replay.cancel"):
    replay_id: str
    operator: str | None = Field(None, max_length=128)


class ReplayCancelled(Message, type_name="replay.cancelled"):
    """``failed`` when cancelled at a pause a failure caused (docs/architecture.md, "The life of
    an action")."""

    status: Literal["cancelled", "failed"] = "cancelled"
    replay_id: str
    session_id: str


class Ack(Message, type_name="ack"):
    """A plain 'done' for requests that need no other answer."""

    status: str = "ok"
    detail: dict[str, Any] = Field(default_factory=dict)
