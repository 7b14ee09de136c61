"""The versioned msgpack envelope: ``encode`` a message, ``decode`` bytes into a validated one.

On the wire every message is a msgpack map ``{"v": 1, "type": str, "id": str, "body": map}``.
``id`` correlates a reply with its request (a client may keep several requests outstanding).
Decoding never raises anything but :class:`MessageError`.

Every process encodes and decodes each message it sends or receives, so both are kept to the
least Python per call: the pydantic validator and serializer are called directly (what
``model_validate`` / ``model_dump`` do after checking their arguments), msgpack's Packer starts
with a buffer sized for an envelope, and the size limit is read from the environment once.
"""

from __future__ import annotations

import os
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
    """A fresh message id: 128 random bits as 32 hex digits (the shape of a UUID4's hex).

    ``os.urandom`` is what ``uuid4`` draws from, without building a UUID object.
    """
    return os.urandom(16).hex()


_limit: int | None = None  # LEA_MAX_MESSAGE_BYTES, read by the first max_message_bytes()


def max_message_bytes() -> int:
    """The size limit, from ``LEA_MAX_MESSAGE_BYTES`` or the 16 MiB default.

    Read once per process: the environment is the process's start-up configuration, and an
    ``os.environ`` look-up per message costs about as much as parsing a small message.
    """
    global _limit
    if _limit is None:
        raw = os.environ.get("LEA_MAX_MESSAGE_BYTES")
        _limit = int(raw) if raw and raw.isdigit() else DEFAULT_MAX_MESSAGE_BYTES
    return _limit


_BUFFER_BYTES = 1024
"""A Packer's first buffer: most envelopes fit (it grows for bigger ones)."""
try:
    msgpack.Packer(buf_size=_BUFFER_BYTES)
    _SIZED_PACKER = True
except TypeError:  # msgpack < 1.1 has no buf_size
    _SIZED_PACKER = False


def encode(body: Message, msg_id: str | None = None) -> bytes:
    """The wire bytes of ``body`` in an envelope with ``msg_id`` (a new id if omitted)."""
    type_name = body.type_name
    if not type_name:
        raise TypeError(f"{type(body).__name__} has no registered type name")
    envelope = {
        "v": PROTOCOL_VERSION,
        "type": type_name,
        "id": new_id() if msg_id is None else msg_id,
        # model_dump(mode="python") without its argument handling; python mode keeps bytes as
        # bytes: msgpack carries them as bin, with no base64.
        "body": body.__pydantic_serializer__.to_python(body),
    }
    # packb's Packer allocates 256 KiB first (1 MiB before msgpack 1.1): a third of the cost
    # of a small envelope. A new Packer per message still: nothing shared between threads.
    if _SIZED_PACKER:
        data: bytes = msgpack.Packer(use_bin_type=True, buf_size=_BUFFER_BYTES).pack(envelope)
    else:
        data = msgpack.packb(envelope, use_bin_type=True)
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


_FIELDS = ("v", "type", "id", "body")
_FIELD_SET = frozenset(_FIELDS)


def _field_error(obj: dict[Any, Any], msg_id: str | None) -> MessageError:
    """The error of an envelope whose keys are not exactly :data:`_FIELDS`."""
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        return MessageError("not_envelope", f"missing field(s): {', '.join(missing)}", msg_id)
    extra = sorted(str(k) for k in obj if k not in _FIELD_SET)
    return MessageError("not_envelope", f"unknown field(s): {', '.join(extra)}", msg_id)


def decode(data: bytes, *, limit: int | None = None) -> Envelope[Message]:
    """Validate ``data`` into an :class:`Envelope`, or raise :class:`MessageError`."""
    if limit is None:
        limit = max_message_bytes() if _limit is None else _limit
    plain = type(data) is bytes  # what sockets give: the isinstance and the copy are skipped
    if not plain and not isinstance(data, bytes | bytearray | memoryview):
        raise MessageError("not_msgpack", f"expected bytes, got {type(data).__name__}")
    if len(data) > limit:
        raise MessageError("too_large", f"{len(data)} bytes exceeds the {limit}-byte limit")
    obj = _unpack(data if plain else bytes(data), limit)
    if type(obj) is not dict:  # unpackb makes plain dicts, never a subclass
        raise MessageError("not_envelope", f"expected a map, got {type(obj).__name__}")
    msg_id = obj.get("id")
    if type(msg_id) is not str or len(msg_id) > 128:
        msg_id = None
    if obj.keys() != _FIELD_SET:  # keys are str or bytes (strict_map_key): hashable
        raise _field_error(obj, msg_id)
    version = obj["v"]
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise MessageError(
            "unsupported_version", f"version {version!r}, expected {PROTOCOL_VERSION}", msg_id
        )
    if msg_id is None:
        raise MessageError("not_envelope", "field 'id' must be a string of at most 128 chars")
    type_name = obj["type"]
    model = model_for(type_name) if type(type_name) is str else None
    if model is None:
        raise MessageError("unknown_type", f"unknown message type {type_name!r}", msg_id)
    body = obj["body"]
    if type(body) is not dict:
        raise MessageError("invalid_body", "field 'body' must be a map", msg_id)
    try:
        # model_validate() without its argument checks: the same validator, the same errors.
        message: Message = model.__pydantic_validator__.validate_python(body)
    except ValidationError as exc:
        raise MessageError("invalid_body", _describe(type_name, exc), msg_id) from None
    return Envelope(msg_id, message)  # positional: cheaper than keywords


def _describe(type_name: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(body)"
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - len(parts)
    suffix = f" (+{more} more)" if more > 0 else ""
    return f"{type_name}: " + "; ".join(parts) + suffix
