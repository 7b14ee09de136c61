"""The real-screen executor (mss capture, screeninfo monitors, pyautogui input): not yet.

It comes in a later issue (DESIGN §6). Until then it refuses to start, loudly, rather than
pretend: an agent that reported every action as failed would look alive and do nothing.
"""

from __future__ import annotations

from agent.effects import EffectsLog
from agent.executors.base import ActionOutcome, ExecutorUnavailable
from messages.dispatch import DispatchAction

NOT_IMPLEMENTED = (
    "the desktop executor (real screen, mouse and keyboard) is not implemented yet; "
    "run the agent with --executor simulated"
)


class DesktopExecutor:
    """Placeholder: constructing it raises :class:`ExecutorUnavailable`."""

    name = "desktop"

    def __init__(self) -> None:
        raise ExecutorUnavailable(NOT_IMPLEMENTED)

    def execute(self, dispatch: DispatchAction, effects: EffectsLog | None) -> ActionOutcome:
        return ActionOutcome.failure("executor_unavailable:desktop", needs_human=True)

    def close(self) -> None:
        """Nothing to release."""
