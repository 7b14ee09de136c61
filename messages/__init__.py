"""Every message type as a pydantic model, and the msgpack codec that carries them."""

from messages import (
    audit,
    dispatch,
    events,
    loop,
    monitor,
    pause,
    queue,
    replay,
    safety_checks,
    workflow,
)
from messages.base import Message, model_for, registered_types
from messages.codec import (
    DEFAULT_MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    Envelope,
    MessageError,
    decode,
    encode,
    new_id,
)
from messages.control import ErrorReply, Ping, Pong
from messages.events import Event

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "Envelope",
    "ErrorReply",
    "Event",
    "Message",
    "MessageError",
    "Ping",
    "Pong",
    "audit",
    "decode",
    "dispatch",
    "encode",
    "events",
    "loop",
    "model_for",
    "monitor",
    "new_id",
    "pause",
    "queue",
    "registered_types",
    "replay",
    "safety_checks",
    "workflow",
]
