"""Loop-detector conversation: dispatcher ↔ ``loop_detector`` (docs/screens-and-pauses.md).

After every report of a replay, before dispatching its next action, the dispatcher sends an
:class:`ObserveStep` and gets a :class:`LoopVerdict`; when the replay ends it sends a
:class:`ForgetReplay` (answered by :class:`messages.replay.Ack`) so the rings are freed.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, field_validator

from messages.base import Message
from messages.dispatch import ActionSite
from messages.workflow import ActionType

LOOP_DETECTED: Final = "loop_detected"
"""The ``reason`` of a positive verdict, and the replay's ``pause_reason`` (origin: spec 01)."""

Signal = Literal["screen_static", "action_repeat", "retry_threshold"]

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"
IMAGE_MAGIC: Final = (_PNG, _JPEG)
"""How a screenshot the detector reads begins."""


class ObserveStep(Message, type_name="loop.observe"):
    """One applied report: the step as dispatched and what the agent saw after it."""

    replay_id: str = Field(min_length=1, max_length=128)
    session_id: str = Field("", max_length=128)
    action_id: str = Field(min_length=1, max_length=128)
    """As dispatched: may end with ``_retry{N}`` / ``_resume{N}``."""
    base_action_id: str = Field(min_length=1, max_length=128)
    """The workflow step id behind ``action_id`` (suffix removed)."""
    action_type: ActionType
    target: dict[str, Any] | None = None
    """The action's ``target_spec`` as JSON (``model_dump(mode="json")``): part of its signature."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """The action's parameters (text typed, keys, scroll delta): part of its signature."""
    actual_position: dict[str, float] | None = None
    """Where the agent clicked (``x_pct``/``y_pct``), from the report."""
    site: ActionSite | None = None
    """Where the agent says the action acted (foreground window, focus), from the report."""
    success: bool
    error: str | None = Field(None, max_length=2000)
    warning: str | None = Field(None, max_length=2000)
    retry_count: int = Field(0, ge=0, le=1_000_000)
    """Business retries of this step run since a person last resumed it, the one this report
    is about included (3 on the report of ``{step}_retry3``); see
    actors/dispatcher/machine/consult.py."""
    screenshot_after: bytes | None = None
    """The agent's screenshot after the action, PNG or JPEG, as the agent sent it."""

    @field_validator("screenshot_after")
    @classmethod
    def _png_or_jpeg(cls, value: bytes | None) -> bytes | None:
        if value is not None and not value.startswith(IMAGE_MAGIC):
            raise ValueError("screenshot_after must be PNG or JPEG bytes")
        return value


class LoopVerdict(Message, type_name="loop.verdict"):
    """``{detected, reason, signal, evidence}``; one positive signal suffices."""

    detected: bool
    reason: str = ""
    signal: Signal | Literal[""] = ""
    evidence: dict[str, Any] = Field(default_factory=dict)

    def pause_message(self) -> str:
        """The replay's ``pause_message``: ``Léa semble bloquée — <signal> (<evidence>)``."""
        shown = ", ".join(f"{key}={value}" for key, value in self.evidence.items())
        return f"Léa semble bloquée — {self.signal} ({shown})"


class ForgetReplay(Message, type_name="loop.forget"):
    """The replay ended (completed, failed, cancelled): free its rings. Answered by Ack."""

    replay_id: str = Field(min_length=1, max_length=128)


MAX_OBSERVE_BATCH: Final = 256
"""Steps in one :class:`ObserveBatch` at most."""


class ObserveBatch(Message, type_name="loop.observe_batch"):
    """Several applied reports, in the order they were applied; answered by
    :class:`LoopVerdicts`, in the same order. The dispatcher keeps one batch in flight and
    gathers the steps applied meanwhile into the next: one request (one broker round trip,
    one turn of the detector) for as many steps as came during the last one."""

    steps: list[ObserveStep] = Field(min_length=1, max_length=MAX_OBSERVE_BATCH)


class LoopVerdicts(Message, type_name="loop.verdicts"):
    """The verdict on each step of an :class:`ObserveBatch`, or None and the problem (a
    screenshot that does not decode: the step was not judged, nothing was kept of it)."""

    verdicts: list[LoopVerdict | None] = Field(max_length=MAX_OBSERVE_BATCH)
    problems: list[str | None] = Field(max_length=MAX_OBSERVE_BATCH)
