"""The codec's fast paths against the plain implementation they replaced: the same bytes on
the wire for every message type, the same message or the same error for any input.

Agents in the field speak the wire format, and tests and handlers rely on the error codes
and texts: :func:`reference_encode` / :func:`reference_decode` are the straightforward
``model_dump`` + ``packb`` / ``unpackb`` + ``model_validate`` versions, kept here as the oracle.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from messages import codec
from messages.audit import GetScreenshot
from messages.base import Message, model_for, registered_types
from messages.codec import (
    PROTOCOL_VERSION,
    Envelope,
    MessageError,
    _describe,
    decode,
    encode,
    new_id,
)
from messages.control import ErrorReply
from tests.fuzzing import Deriver, structured, unstructured, weighted


def reference_encode(body: Message, msg_id: str) -> bytes:
    envelope = {"v": PROTOCOL_VERSION, "type": body.type_name, "id": msg_id,
                "body": body.model_dump(mode="python")}
    data: bytes = msgpack.packb(envelope, use_bin_type=True)
    return data


def reference_decode(data: Any, limit: int) -> Envelope[Message]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise MessageError("not_msgpack", f"expected bytes, got {type(data).__name__}")
    if len(data) > limit:
        raise MessageError("too_large", f"{len(data)} bytes exceeds the {limit}-byte limit")
    try:
        obj = msgpack.unpackb(
            bytes(data), raw=False, strict_map_key=True,
            max_str_len=limit, max_bin_len=limit, max_array_len=1 << 20, max_map_len=1 << 20)
    except Exception as exc:
        detail = str(exc) or "invalid msgpack"
        raise MessageError("not_msgpack", f"{type(exc).__name__}: {detail}") from None
    if not isinstance(obj, dict):
        raise MessageError("not_envelope", f"expected a map, got {type(obj).__name__}")
    value = obj.get("id")
    msg_id = value if isinstance(value, str) and len(value) <= 128 else None
    missing = [k for k in ("v", "type", "id", "body") if k not in obj]
    if missing:
        raise MessageError("not_envelope", f"missing field(s): {', '.join(missing)}", msg_id)
    extra = sorted(str(k) for k in obj if k not in ("v", "type", "id", "body"))
    if extra:
        raise MessageError("not_envelope", f"unknown field(s): {', '.join(extra)}", msg_id)
    if obj["v"] != PROTOCOL_VERSION or isinstance(obj["v"], bool):
        raise MessageError(
            "unsupported_version", f"version {obj['v']!r}, expected {PROTOCOL_VERSION}", msg_id)
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


def outcome(fn: Any, *args: Any) -> tuple[str, Any, Any, Any]:
    """What ``fn(*args)`` does: ("ok", id, body, None) or ("error", code, detail, msg_id).

    The body as its encoding: NaN fields would make equal bodies compare unequal."""
    try:
        envelope = fn(*args)
    except MessageError as exc:
        return "error", exc.code, exc.detail, exc.msg_id
    return "ok", envelope.id, reference_encode(envelope.body, ""), None


MADE: dict[str, Message] = {"audit.get_screenshot": GetScreenshot(sha256="0" * 64)}
"""A valid message of each type whose field patterns the strategies do not match."""


def messages_of(type_name: str) -> st.SearchStrategy[Message]:
    """Valid messages of ``type_name`` (drawn bodies that do not validate are skipped)."""
    model = model_for(type_name)
    assert model is not None
    if type_name in MADE:
        return st.just(MADE[type_name])

    def build(body: dict[str, Any]) -> Message | None:
        try:
            return model.model_validate(body)
        except ValidationError:
            return None

    return Deriver().model(model).map(build).filter(lambda m: m is not None).map(
        lambda m: cast(Message, m))


FUZZ = settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("type_name", registered_types())
def test_encode_gives_the_bytes_of_model_dump_and_packb(type_name: str) -> None:
    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(messages_of(type_name), st.text(max_size=40))
    def check(message: Message, msg_id: str) -> None:
        data = encode(message, msg_id)
        assert data == reference_encode(message, msg_id)
        assert outcome(decode, data) == ("ok", msg_id, reference_encode(message, ""), None)

    check()


inputs = weighted((3, structured(Deriver())), (2, unstructured()))


@FUZZ
@given(inputs)
def test_decode_gives_the_same_message_or_error(data: bytes) -> None:
    limit = codec.max_message_bytes()
    assert outcome(decode, data) == outcome(reference_decode, data, limit)
    assert outcome(decode, bytearray(data)) == outcome(reference_decode, bytearray(data), limit)


@FUZZ
@given(inputs, st.integers(0, 300))
def test_decode_under_a_small_limit_gives_the_same_outcome(data: bytes, limit: int) -> None:
    assert outcome(lambda d: decode(d, limit=limit), data) == outcome(
        reference_decode, data, limit)


class Bytes(bytes):
    pass


def test_inputs_that_are_not_plain_bytes() -> None:
    data = encode(ErrorReply(code="x", message="y"), "i")
    for value in (Bytes(data), memoryview(data), bytearray(data), "text", None, 5):
        assert outcome(decode, value) == outcome(reference_decode, value, 1 << 24)


def test_new_ids_are_32_hex_digits_and_distinct() -> None:
    ids = {new_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_threads_encoding_at_once_each_get_their_own_bytes() -> None:
    # Encoding shares no buffer between threads: concurrent encodes never mix their bytes.
    failures: list[str] = []
    start = threading.Barrier(4)

    def work(k: int) -> None:
        start.wait()
        for i in range(2000):
            message = ErrorReply(code=f"c{k}", message="m" * (i % 50))
            if encode(message, f"{k}-{i}") != reference_encode(message, f"{k}-{i}"):
                failures.append(f"{k}-{i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_a_message_bigger_than_the_first_buffer_is_whole() -> None:
    big = ErrorReply(code="x", message="y" * (2 << 20))
    assert encode(big, "b") == reference_encode(big, "b")
    small = ErrorReply(code="x", message="y")
    assert encode(small, "s") == reference_encode(small, "s")


def test_a_message_that_cannot_be_packed_leaves_the_next_ones_right() -> None:
    odd = ErrorReply(code="x", message="y", detail={"value": object()})
    try:
        encode(odd, "x")
    except Exception:  # msgpack refuses it halfway through the envelope: nothing is sent
        pass
    else:
        raise AssertionError("an object() was packed")
    ok = ErrorReply(code="x", message="y", detail={"value": [1, "two", {"three": 3.0}]})
    assert encode(ok, "y") == reference_encode(ok, "y")
