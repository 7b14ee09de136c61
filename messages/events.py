"""Bus events: the first frame is the topic (``lea:...``), the second an encoded :class:`Event`."""

from __future__ import annotations

from typing import Any, Final

from pydantic import Field

from messages.base import Message

TOPIC_PREFIX: Final = "lea:"

# From the spec.
MONITOR_ROUTED: Final = "lea:monitor_routed"
MONITOR_UNAVAILABLE: Final = "lea:monitor_unavailable"
MONITOR_INVALID_INDEX: Final = "lea:monitor_invalid_index"
LOOP_DETECTED: Final = "lea:loop_detected"
SAFETY_CHECKS_GENERATED: Final = "lea:safety_checks_generated"
SAFETY_CHECKS_LLM_FAILED: Final = "lea:safety_checks_llm_failed"
DISPATCH_ORPHAN_RESENT: Final = "lea:dispatch_orphan_resent"
DISPATCH_ORPHAN_GIVEUP: Final = "lea:dispatch_orphan_giveup"
DEAD_CLIENT_SIGNAL: Final = "lea:dead_client_signal"
# Ours.
ACTION_DISPATCHED: Final = "lea:action_dispatched"
ACTION_ACKED: Final = "lea:action_acked"
REPLAY_STARTED: Final = "lea:replay_started"
REPLAY_PAUSED: Final = "lea:replay_paused"
REPLAY_RESUMED: Final = "lea:replay_resumed"
REPLAY_CANCELLED: Final = "lea:replay_cancelled"
REPLAY_COMPLETED: Final = "lea:replay_completed"
ACTOR_STARTED: Final = "lea:actor_started"
ACTOR_EXITED: Final = "lea:actor_exited"
ACTOR_RESTARTED: Final = "lea:actor_restarted"
PEER_CONNECTED: Final = "lea:peer_connected"
PEER_DISCONNECTED: Final = "lea:peer_disconnected"
BAD_MESSAGE: Final = "lea:bad_message"


class Event(Message, type_name="event"):
    """Something that happened, for watchers; nothing that must not be lost travels only here."""

    topic: str
    source: str
    at: float
    data: dict[str, Any] = Field(default_factory=dict)
