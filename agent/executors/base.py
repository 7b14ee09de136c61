"""What an executor is: it performs one dispatched action and describes the outcome.

An executor runs in the agent's execution thread, one action at a time. It may block (a
``wait``, a slow screen); it should not raise, but if it does the agent reports the
exception as a failure (invariant C1). It sends each input inside an
:class:`~agent.effects.InputTracker` (which writes the effects log right after it, never for
a refusal: wrong window, target not found, ...) and reports the tracker's state as the
outcome's ``input_performed``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from agent.effects import EffectsLog
from messages.dispatch import ActionSite, DispatchAction, InputPerformed
from messages.monitor import MonitorResolution
from messages.workflow import TargetSpec


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """The executor's share of an :class:`~messages.dispatch.ActionReport` (docs/protocol.md).

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
    resolution_box: dict[str, float] | None = None
    target_description: str | None = None
    target_spec: TargetSpec | None = None
    correction: dict[str, Any] | None = None
    system_dialog: dict[str, Any] | None = None
    needs_human: bool = False
    site: ActionSite | None = None
    """Where the input went (foreground window, focus), when the platform can say."""
    output_value: str | None = None
    """A read_text step: what was read (messages/dispatch.py)."""
    monitor_resolution: MonitorResolution | None = None
    """The monitor the executor found for a dispatch that left it to the agent
    (``agent_routes``, desktop_target.routed_here)."""
    input_performed: InputPerformed = "unknown"
    """Set by the executor from its :class:`~agent.effects.InputTracker` once the action is
    over; ``unknown`` until then, so an outcome nobody vouched for is never retried."""

    @classmethod
    def failure(cls, error: str, **fields: Any) -> ActionOutcome:
        return cls(success=False, error=error, **fields)

    def report_fields(self) -> dict[str, Any]:
        """Keyword arguments for ActionReport (target_spec kept as a model)."""
        fields = asdict(self)
        fields["target_spec"] = self.target_spec
        fields["site"] = self.site
        fields["monitor_resolution"] = self.monitor_resolution
        return fields


class ExecutorUnavailable(RuntimeError):
    """This executor cannot run here (no screen, not implemented, missing library)."""


class Executor(Protocol):
    """Performs actions. ``name`` appears in logs."""

    name: str

    def execute(self, dispatch: DispatchAction, effects: EffectsLog | None) -> ActionOutcome:
        """Perform ``dispatch.action``; record each input in ``effects`` right after it."""
        ...

    def close(self) -> None:
        """Release what the executor holds (called once, when the agent stops)."""
        ...
