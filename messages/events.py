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
ACTION_PROGRESS: Final = "lea:action_progress"
ACTION_WITHDRAWN: Final = "lea:action_withdrawn"
"""An input action taken back before the agent was granted its claim (a loop verdict on the
step before it came in meanwhile): it never ran, and runs on resume."""
OUTPUT_READ: Final = "lea:output_read"
"""A read_text step's value kept as the run's output (``value`` masked if sensitive)."""
REPLAY_STARTED: Final = "lea:replay_started"
REPLAY_PAUSED: Final = "lea:replay_paused"
REPLAY_RESUMED: Final = "lea:replay_resumed"
REPLAY_CANCELLED: Final = "lea:replay_cancelled"
REPLAY_COMPLETED: Final = "lea:replay_completed"
QUEUE_CREATED: Final = "lea:queue_created"
QUEUE_ITEMS_ADDED: Final = "lea:queue_items_added"
QUEUE_ITEM_CHANGED: Final = "lea:queue_item_changed"
"""A work item changed state (docs/queues.md): queue, reference, state, reason, replay."""
QUEUE_ITEM_AT_RISK: Final = "lea:queue_item_at_risk"
"""A work item can no longer start before its deadline, given the queue's measured
durations and the free agents of its pool (docs/queues.md, "Deadlines")."""
ACTOR_STARTED: Final = "lea:actor_started"
ACTOR_EXITED: Final = "lea:actor_exited"
ACTOR_RESTARTED: Final = "lea:actor_restarted"
RESTART_COUNTS: Final = "lea:restart_counts"
"""Every few seconds, the supervisor's count of each child's restarts since it started
(``counts``: name → n): the metrics' ``lea_actor_restarts_total``."""
PEER_CONNECTED: Final = "lea:peer_connected"
PEER_DISCONNECTED: Final = "lea:peer_disconnected"
# A broker of a pair changed state, or found its pair wrong (broker/binary_star.py).
BROKER_STATE: Final = "lea:broker_state"
DISPATCHER_ROLE: Final = "lea:dispatcher_role"
"""A dispatcher on PostgreSQL is ``leader`` or ``standby`` (actors/dispatcher/leader/election.py):
told when it changes and every few seconds, with its pid, host and what its broker said."""
# A CURVE handshake refused by the broker (key not in the allow-list); docs/protocol.md.
PEER_REFUSED: Final = "lea:peer_refused"
WORKER_REFUSED: Final = "lea:worker_refused"
"""A READY the broker refused: a peer authenticated (CURVE) as M may serve ``agent.M`` only, and
the actors' services are served from the tree's own door only (broker/tree_door.py)."""
SENDER_REFUSED: Final = "lea:sender_refused"
"""A request refused for who sent it: ``forbidden`` (an agent asking what only local peers
may, e.g. a replay control command) or ``wrong_machine`` (an agent speaking for another)."""
BAD_MESSAGE: Final = "lea:bad_message"
LOOP_CHECK_MISSED: Final = "lea:loop_check_missed"
"""The loop detector did not answer in time: the replay went on without its verdict."""
LOOP_EMBEDDER_UNAVAILABLE: Final = "lea:loop_embedder_unavailable"
"""The loop detector's screen embedder is missing or raised: screen_static is off or
skipped (data ``effect`` says which); action_repeat and retry_threshold go on."""
CONSULT_MISSED: Final = "lea:consult_missed"
"""The monitor router or safety_checks did not answer: the dispatcher's fallback was used."""
AUDIT_RECORD_CONFLICT: Final = "lea:audit_record_conflict"
"""A record re-sent under a known record_id with another content (the first is kept)."""
IMAGE_KEY_UNAVAILABLE: Final = "lea:image_key_unavailable"
"""audit_log cannot use the screenshots' keyring (``reason``): records carrying images are
refused (their senders keep them) and no image is served until it is put right."""
AUDIT_BACKLOG: Final = "lea:audit_backlog"
"""A sender's audit records not yet acknowledged by audit_log (``sender``, ``pending``),
told every few seconds (the metrics' ``lea_audit_backlog``, docs/operations.md)."""


class Event(Message, type_name="event"):
    """Something that happened, for watchers; nothing that must not be lost travels only here."""

    topic: str
    source: str
    at: float
    data: dict[str, Any] = Field(default_factory=dict)
