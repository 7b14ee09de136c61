"""What an executor is: it performs one dispatched action and describes the outcome.

An executor runs in the agent's execution thread, one action at a time. It may block (a
``wait``, a slow screen); it should not raise, but if it does the agent reports the
exception as a failure (invariant C1). It sends each input inside an
:class:`~agent.effects.InputTracker` (which writes the effects log right after it, never for
a refusal: wrong window, target not found, ...) and reports the tracker's state as the
outcome's ``input_performed``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from agent.effects import EffectsLog
from messages.dispatch import DispatchAction, InputPerformed, Outcome


@dataclass(frozen=True)
class ActionOutcome(Outcome):
    """The executor's share of an :class:`~messages.dispatch.ActionReport` (docs/protocol.md):
    the report's :class:`~messages.dispatch.Outcome` fields, and whether its input was sent."""

    input_performed: InputPerformed = "unknown"
    """Set by the executor from its :class:`~agent.effects.InputTracker` once the action is
    over; ``unknown`` until then, so an outcome nobody vouched for is never retried. (The
    report's is None when an agent older than the field sent it.)"""

    @classmethod
    def failure(cls, error: str, **fields: Any) -> ActionOutcome:
        return cls(success=False, error=error, **fields)

    def report_fields(self) -> dict[str, Any]:
        """Keyword arguments for ActionReport, as they are (models stay models)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


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
