"""The msgpack codec: round trips, and one clear error type for every kind of bad input."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from messages import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Envelope,
    ErrorReply,
    MessageError,
    Ping,
    Pong,
    codec,
    decode,
    encode,
    registered_types,
)
from messages.dispatch import DispatchAction, DispatchMeta
from messages.replay import StartReplay
from messages.workflow import Action


def pack(obj: object) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def test_round_trip_keeps_id_and_body() -> None:
    pong = Pong(service="dispatcher", pid=42, started_at=1.5)
    envelope = decode(encode(pong, "abc"))
    assert envelope == Envelope(id="abc", body=pong)
    assert envelope.type == "pong"


def test_every_registered_type_is_unique_and_known() -> None:
    names = registered_types()
    assert len(names) == len(set(names))
    assert {"ping", "pong", "error", "event", "replay.start", "action.report"} <= set(names)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\xc1", "not_msgpack"),
        (b"", "not_msgpack"),
        (pack({"v": 1, "type": "ping", "id": "x", "body": {}}) + b"\x00", "not_msgpack"),
        (pack([1, 2]), "not_envelope"),
        (pack({"v": 1, "type": "ping", "body": {}}), "not_envelope"),
        (pack({"v": 1, "type": "ping", "id": "x", "body": {}, "more": 1}), "not_envelope"),
        (pack({"v": 1, "type": "ping", "id": 7, "body": {}}), "not_envelope"),
        (pack({"v": 2, "type": "ping", "id": "x", "body": {}}), "unsupported_version"),
        (pack({"v": True, "type": "ping", "id": "x", "body": {}}), "unsupported_version"),
        (pack({"v": 1, "type": "nope", "id": "x", "body": {}}), "unknown_type"),
        (pack({"v": 1, "type": 5, "id": "x", "body": {}}), "unknown_type"),
        (pack({"v": 1, "type": "ping", "id": "x", "body": [1]}), "invalid_body"),
        (pack({"v": 1, "type": "ping", "id": "x", "body": {"extra": 1}}), "invalid_body"),
        (pack({"v": 1, "type": "pong", "id": "x", "body": {"service": "s"}}), "invalid_body"),
        (pack({"v": 1, "type": "pong", "id": "x",
               "body": {"service": "s", "pid": "nope", "started_at": 1.0}}), "invalid_body"),
    ],
)
def test_bad_input_gives_one_clear_error(data: bytes, code: str) -> None:
    with pytest.raises(MessageError) as info:
        decode(data)
    assert info.value.code == code
    assert code in str(info.value)


def test_error_names_the_faulty_field() -> None:
    data = pack({"v": 1, "type": "replay.start", "id": "r1",
                 "body": {"machine_id": "M", "workflow": {"workflow_id": "w", "actions": [
                     {"action_id": "a", "type": "teleport"}]}}})
    with pytest.raises(MessageError) as info:
        decode(data)
    assert info.value.msg_id == "r1"
    assert "workflow.actions.0.type" in info.value.detail


def test_oversized_message_is_refused_before_parsing() -> None:
    big = encode(ErrorReply(code="x", message="y" * 5000))
    with pytest.raises(MessageError) as info:
        decode(big, limit=1024)
    assert info.value.code == "too_large"
    assert decode(big, limit=1 << 20).body == ErrorReply(code="x", message="y" * 5000)


def test_default_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEA_MAX_MESSAGE_BYTES", "2048")
    monkeypatch.setattr(codec, "_limit", None)  # as in a process that has not decoded yet
    with pytest.raises(MessageError, match="too_large"):
        decode(encode(ErrorReply(code="x", message="y" * 4000)))
    # Read once per process: a later change of the environment is not looked at.
    monkeypatch.setenv("LEA_MAX_MESSAGE_BYTES", "1000000")
    assert codec.max_message_bytes() == 2048


@pytest.mark.parametrize("raw", [None, "", "12x", "-5"])
def test_a_missing_or_unreadable_limit_is_the_default(
    monkeypatch: pytest.MonkeyPatch, raw: str | None
) -> None:
    if raw is None:
        monkeypatch.delenv("LEA_MAX_MESSAGE_BYTES", raising=False)
    else:
        monkeypatch.setenv("LEA_MAX_MESSAGE_BYTES", raw)
    monkeypatch.setattr(codec, "_limit", None)
    assert codec.max_message_bytes() == DEFAULT_MAX_MESSAGE_BYTES


def test_a_valid_workflow_start_decodes_to_models() -> None:
    msg = StartReplay.model_validate({
        "machine_id": "M1",
        "workflow": {"workflow_id": "w", "actions": [
            {"action_id": "a1", "type": "wait", "parameters": {"duration_ms": 10}}]},
    })
    assert decode(encode(msg)).body == msg


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_only_ever_raise_message_error(data: bytes) -> None:
    try:
        decode(data)
    except MessageError:
        pass


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20,
)


@settings(max_examples=2000, deadline=None)
@given(st.sampled_from(registered_types()), json_values, st.text(max_size=10))
def test_random_bodies_of_known_types_only_ever_raise_message_error(
    type_name: str, body: object, msg_id: str
) -> None:
    try:
        decode(pack({"v": 1, "type": type_name, "id": msg_id, "body": body}))
    except MessageError:
        pass


def test_a_dispatch_carries_supersedes_only_when_set() -> None:
    def dispatch(supersedes: list[str]) -> DispatchAction:
        return DispatchAction(
            replay_id="r", session_id="s", machine_id="m", attempt_id="a",
            dispatch_meta=DispatchMeta(first_dispatched_at=1.0),
            action=Action.model_validate({"action_id": "s0_resume", "type": "click"}),
            supersedes=supersedes)

    plain, resume = dispatch([]), dispatch(["s0"])
    # Absent when empty: an agent that predates the field still takes the dispatch.
    body = msgpack.unpackb(encode(plain, "x"), raw=False)["body"]
    assert "supersedes" not in body and "supersedes" not in plain.model_dump(mode="json")
    assert msgpack.unpackb(encode(resume, "y"), raw=False)["body"]["supersedes"] == ["s0"]
    for d in (plain, resume):
        assert decode(encode(d, "z")).body == d


def test_ping_has_an_empty_body() -> None:
    assert decode(encode(Ping())).body == Ping()


def test_bytes_in_a_workflows_parameters_are_refused_as_invalid_body() -> None:
    """msgpack can carry bytes where a workflow (a JSON file) has none; found by the fuzzer
    through the broker: the dispatcher failed storing the workflow as JSON."""
    body = {"machine_id": "m1", "workflow": {"workflow_id": "w", "actions": [
        {"action_id": "a", "type": "scroll", "parameters": {"x": [b"\xce\xc3"]}}]}}
    data = msgpack.packb({"v": 1, "type": "replay.start", "id": "x", "body": body},
                         use_bin_type=True)
    with pytest.raises(MessageError) as refused:
        decode(data)
    assert refused.value.code == "invalid_body" and "parameters" in refused.value.detail
