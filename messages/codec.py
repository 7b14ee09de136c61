"""The versioned msgpack envelope: ``encode`` a message, ``decode`` bytes into a validated one.

On the wire every message is a msgpack map ``{"v": 1, "type": str, "id": str, "body": map}``.
``id`` correlates a reply with its request (a client may keep several requests outstanding).
Decoding never raises anything but :class:`MessageError`.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import msgpack
from pydantic import ValidationError

from messages.base import Message, model_for

PROTOCOL_VERSION = 1
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

ErrorCode = Literal[
    "too_large", "not_msgpack", "not_envelope", "unsupported_version", "unknown_type",
    "invalid_body",
]

M = TypeVar("M", bound=Message)


class MessageError(ValueError):
    """Bytes that are not a valid message; ``code`` says which rule they broke."""

    def __init__(self, code: ErrorCode, detail: str, msg_id: str | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code: ErrorCode = code
        self.detail = detail
        self.msg_id = msg_id


@dataclass(frozen=True, slots=True)
class Envelope(Generic[M]):
    """A decoded message: its correlation id and its validated body."""

    id: str
    body: M

    @property
    def type(self) -> str:
        return self.body.type_name


def new_id() -> str:
    """A fresh message id (UUID hex)."""
    return uuid.uuid4().hex


def max_message_bytes() -> int:
    """The size limit, from ``LEA_MAX_MESSAGE_BYTES`` or the 16 MiB default."""
    raw = os.environ.get("LEA_MAX_MESSAGE_BYTES")
    return int(raw) if raw and raw.isdigit() else DEFAULT_MAX_MESSAGE_BYTES


def encode(body: Message, msg_id: str | None = None) -> bytes:
    """The wire bytes of ``body`` in an envelope with ``msg_id`` (a new id if omitted)."""
    if not body.type_name:
        raise TypeError(f"{type(body).__name__} has no registered type name")
    envelope = {
        "v": PROTOCOL_VERSION,
        "type": body.type_name,
        "id": new_id() if msg_id is None else msg_id,
        # Python mode keeps bytes as bytes: msgpack carries them as bin, with no base64.
        "body": body.model_dump(mode="python"),
    }
    data: bytes = msgpack.packb(envelope, use_bin_type=True)
    return data


def _unpack(data: bytes, limit: int) -> Any:
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True,
            max_str_len=limit, max_bin_len=limit, max_array_len=1 << 20, max_map_len=1 << 20,
        )
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        detail = str(exc) or "invalid msgpack"
        raise MessageError("not_msgpack", f"{type(exc).__name__}: {detail}") from None


def _peek_id(obj: dict[Any, Any]) -> str | None:
    value = obj.get("id")
    return value if isinstance(value, str) and len(value) <= 128 else None


def decode(data: bytes, *, limit: int | None = None) -> Envelope[Message]:
    """Validate ``data`` into an :class:`Envelope`, or raise :class:`MessageError`."""
    limit = max_message_bytes() if limit is None else limit
    if not isinstance(data, bytes | bytearray | memoryview):
        raise MessageError("not_msgpack", f"expected bytes, got {type(data).__name__}")
    if len(data) > limit:
        raise MessageError("too_large", f"{len(data)} bytes exceeds the {limit}-byte limit")
    obj = _unpack(bytes(data), limit)
    if not isinstance(obj, dict):
        raise MessageError("not_envelope", f"expected a map, got {type(obj).__name__}")
    msg_id = _peek_id(obj)
    missing = [k for k in ("v", "type", "id", "body") if k not in obj]
    if missing:
        raise MessageError("not_envelope", f"missing field(s): {', '.join(missing)}", msg_id)
    extra = sorted(str(k) for k in obj if k not in ("v", "type", "id", "body"))
    if extra:
        raise MessageError("not_envelope", f"unknown field(s): {', '.join(extra)}", msg_id)
    if obj["v"] != PROTOCOL_VERSION or isinstance(obj["v"], bool):
        raise MessageError(
            "unsupported_version", f"version {obj['v']!r}, expected {PROTOCOL_VERSION}", msg_id
        )
    if msg_id is None:
        raise MessageError("not_envelope", "field 'id' must be a string of at most 128 chars")
    type_name = obj["type"]
    model = model_for(type_name) if isinstance(type_name, str) else None
    if model is None:
        raise MessageError("unknown_type", f"unknown message type {type_name!r}", msg_id)
    if not isinstance(obj["body"], dict):
        raise MessageError("invalid_body", "field 'body' must be a map", msg_id)
    try:
        body = model.model_validate(obj["body"])
    except ValidationError as exc:
        raise MessageError("invalid_body", _describe(type_name, exc), msg_id) from None
    return Envelope(id=msg_id, body=body)


def _describe(type_name: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(body)"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - len(parts)
    suffix = f" (+{more} more)" if more > 0 else ""
    return f"{type_name}: " + "; ".join(parts) + suffix
