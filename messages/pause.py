"""Pause message on the agent: dispatcher → ``agent.<machine_id>`` (docs/screens-and-pauses.md).

When a replay pauses, the person at the workstation must see why, in full: the agent shows
the message in a window where a screen exists, in its log otherwise (agent/windows/pause_notice.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from messages.base import Message
from messages.replay import SafetyCheck


class AgentPaused(Message, type_name="agent.paused"):
    """Dispatcher → ``agent.<machine_id>``: this replay is paused; show why to the person.

    Answered by Ack. The agent shows each pause once (``replay_id`` + ``paused_at``; the
    dispatcher sends it again after every agent hello) and never truncates ``message``.
    """

    replay_id: str = Field(min_length=1, max_length=128)
    reason: str = Field("", max_length=200)
    message: str = Field("", max_length=20_000)
    action_id: str | None = Field(None, max_length=200)
    monitor_index: int | None = None
    """The paused step's monitor (the workflow's ``monitor_index``), when it names one."""
    safety_checks: list[SafetyCheck] = Field(default_factory=list, max_length=100)
    paused_at: float | None = None


class AgentPauseEnded(Message, type_name="agent.pause_ended"):
    """Dispatcher → agent: that pause is over (resumed or cancelled); close its window."""

    replay_id: str = Field(min_length=1, max_length=128)
    status: Literal["resumed", "cancelled", "completed", "failed"] = "resumed"
