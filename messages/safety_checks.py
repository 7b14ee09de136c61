"""Safety-checks conversation: dispatcher → ``safety_checks``
(docs/screens-and-pauses.md).

Before a replay pauses at a ``pause_for_human``, the dispatcher asks for the checklist the
person must see: :class:`BuildPausePayload` is answered by :class:`PausePayload` (or an
ErrorReply). The declarative part is a pure function of the action (:func:`declared_checks`),
so a dispatcher that gets no answer builds exactly the same checks itself.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from messages.base import Message
from messages.monitor import Monitor
from messages.replay import Mode, SafetyCheck
from messages.workflow import Action, SafetyLevel

PAUSE_REASON: Literal["user_request"] = "user_request"  # a pause_for_human

# Why no contextual check came from the LLM (``lea:safety_checks_llm_failed`` ``cause``).
LlmCause = Literal[
    "timeout",            # no complete answer within RPA_SAFETY_CHECKS_LLM_TIMEOUT_S
    "unreachable",        # connection refused, name not resolved, connection dropped
    "http_error",         # an HTTP status other than 2xx
    "invalid_response",   # a 2xx whose body is not Ollama's JSON reply
    "invalid_json",       # the model's answer is not JSON
    "schema_violation",   # JSON, but not {additional_checks: [{label, evidence}]}
    "no_screenshot",      # nothing to look at: no request is sent
    "client_error",       # anything else (a bug or an unexpected library error)
]
# What happened to the LLM layer for one pause.
LlmStatus = Literal[
    "not_requested",  # safety_level is not medical_critical
    "disabled",       # RPA_SAFETY_CHECKS_LLM_ENABLED=0 (kill switch)
    "ok",             # answered; its checks (maybe none) are in the payload
    "failed",         # see LlmAudit.error; the payload holds no LLM check
]


class RecentStep(Message):
    """A step already resolved in this replay, for the model's context."""

    action_id: str = Field(min_length=1, max_length=200)
    type: str = Field(min_length=1, max_length=40)
    intention: str | None = Field(None, max_length=500)


class ReplayContext(Message):
    """Where the replay stands when it reaches the pause (the prompt's context)."""

    workflow_id: str = Field(min_length=1, max_length=200)
    workflow_name: str = Field("", max_length=500)
    index: int = Field(ge=0)  # steps resolved before this pause
    total: int = Field(ge=0)
    recent_steps: list[RecentStep] = Field(default_factory=list, max_length=20)  # oldest first


class BuildPausePayload(Message, type_name="safety.build_pause_payload"):
    """Dispatcher → safety_checks: the checklist for this pause_for_human step."""

    replay_id: str = Field(min_length=1, max_length=128)
    session_id: str = Field(min_length=1, max_length=128)
    machine_id: str = Field(min_length=1, max_length=128)
    mode: Mode
    action: Action
    context: ReplayContext
    last_screenshot: bytes | None = None  # PNG of the workstation's current screen
    time_left_s: float | None = Field(None, ge=0, le=600)
    """What is left of RPA_SAFETY_CHECKS_LLM_TIMEOUT_S after the fresh capture (None: all)."""

    @field_validator("action")
    @classmethod
    def _a_pause(cls, action: Action) -> Action:
        if action.type != "pause_for_human":
            raise ValueError(f"action {action.action_id!r} is a {action.type!r}, "
                             "not a pause_for_human")
        return action


class CaptureScreen(Message, type_name="agent.capture_screen"):
    """Dispatcher → ``agent.<machine_id>``: a fresh capture of the monitor a pause is about,
    for the model, when no earlier step left a screenshot (a pause at the first step, or
    after a step without capture). Answered by :class:`ScreenCaptured`."""

    replay_id: str = Field(min_length=1, max_length=128)
    action_id: str = Field(min_length=1, max_length=200)
    monitor_index: int | None = None
    monitor_geometry: Monitor | None = None


class ScreenCaptured(Message, type_name="agent.screen_captured"):
    """The PNG captured (``image``), or why none (``error``)."""

    image: bytes | None = None
    monitor_idx: int | None = None  # -1: the composite
    error: str | None = Field(None, max_length=500)


class DroppedCheck(Message):
    """A check the model proposed that the payload leaves out, and why (for the audit)."""

    label: str
    why: Literal["repeats_declared", "repeats_llm", "over_max", "blank"]


class LlmAudit(Message):
    """One call to the local model, kept with the pause for the audit trail."""

    model: str
    url: str
    prompt: str
    image_sha256: str | None = None  # the screenshot attached (audit stores it by hash)
    raw_answer: str | None = None  # the model's text as received, before any validation
    latency_ms: float = 0.0
    error: LlmCause | None = None
    error_detail: str | None = None
    dropped: list[DroppedCheck] = Field(default_factory=list)


class PausePayload(Message, type_name="safety.pause_payload"):
    """safety_checks → dispatcher: what the person sees and must acknowledge.

    ``checks``: declarative first (workflow order), then ``llm_contextual`` (never
    required), then at most one ``system`` check (RPA_SAFETY_CHECKS_LLM_FAIL_MODE=closed).
    """

    checks: list[SafetyCheck] = Field(default_factory=list)
    pause_reason: str = PAUSE_REASON
    message: str
    safety_level: SafetyLevel | None = None
    llm_status: LlmStatus = "not_requested"
    llm: LlmAudit | None = None  # None when no call was attempted


