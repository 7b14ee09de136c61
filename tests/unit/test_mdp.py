"""The pure MDP/0.2 frame functions of transport.mdp, checked against the RFC 18 tables."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transport import mdp
from transport.mdp import ProtocolError, parse_client, parse_worker, valid_service_name


def test_constants_are_the_rfc_values() -> None:
    assert (mdp.CLIENT, mdp.WORKER) == (b"MDPC02", b"MDPW02")
    assert (mdp.C_REQUEST, mdp.C_PARTIAL, mdp.C_FINAL) == (b"\x01", b"\x02", b"\x03")
    worker = [mdp.W_READY, mdp.W_REQUEST, mdp.W_PARTIAL, mdp.W_FINAL, mdp.W_HEARTBEAT,
              mdp.W_DISCONNECT]
    assert worker == [b"\x01", b"\x02", b"\x03", b"\x04", b"\x05", b"\x06"]


def test_builders_produce_the_rfc_frames() -> None:
    assert mdp.client_request(b"echo", b"a", b"b") == [b"MDPC02", b"\x01", b"echo", b"a", b"b"]
    assert mdp.client_reply(b"echo", [b"r"]) == [b"MDPC02", b"\x03", b"echo", b"r"]
    assert mdp.client_reply(b"echo", (b"r",), final=False) == [b"MDPC02", b"\x02", b"echo", b"r"]
    assert mdp.worker_ready(b"echo") == [b"MDPW02", b"\x01", b"echo"]
    assert mdp.worker_request(b"C", [b"x"]) == [b"MDPW02", b"\x02", b"C", b"", b"x"]
    assert mdp.worker_reply(b"C", b"x") == [b"MDPW02", b"\x04", b"C", b"", b"x"]
    assert mdp.worker_reply(b"C", b"x", final=False) == [b"MDPW02", b"\x03", b"C", b"", b"x"]
    assert mdp.heartbeat() == [b"MDPW02", b"\x05"]
    assert mdp.disconnect() == [b"MDPW02", b"\x06"]


@pytest.mark.parametrize("name,ok", [
    (b"a", True), (b"agent.pc-12", True), (b"x" * 255, True), (b"~!", True),
    (b"", False), (b"x" * 256, False), (b"has space", False), (b"tab\t", False),
    (b"\x00", False), (b"\x7f", False), ("é".encode(), False),
])
def test_valid_service_name(name: bytes, ok: bool) -> None:
    assert valid_service_name(name) is ok


def test_parse_client_request() -> None:
    req = parse_client(mdp.client_request(b"echo", b"one", b"two"))
    assert req.service == b"echo"
    assert req.body == [b"one", b"two"]


def test_parse_client_keeps_an_empty_body_frame() -> None:
    assert parse_client(mdp.client_request(b"echo", b"")).body == [b""]


@pytest.mark.parametrize("frames", [
    [b"MDPC02", b"\x01", b"echo"],                 # no body: 4 frames or more
    [b"MDPC02", b"\x02", b"echo", b"x"],           # PARTIAL goes broker -> client only
    [b"MDPC02", b"\x03", b"echo", b"x"],           # FINAL too
    [b"MDPC02", b"\x01", b"", b"x"],               # empty service
    [b"MDPC02", b"\x01", b"bad name", b"x"],       # not printable
    [b"MDPC02"],
    [],
])
def test_parse_client_rejects(frames: list[bytes]) -> None:
    with pytest.raises(ProtocolError):
        parse_client(frames)


def test_parse_worker_commands() -> None:
    ready = parse_worker(mdp.worker_ready(b"echo"))
    assert (ready.command, ready.service) == (mdp.W_READY, b"echo")
    final = parse_worker(mdp.worker_reply(b"CLIENT", b"a", b"b"))
    assert (final.command, final.client, final.body) == (mdp.W_FINAL, b"CLIENT", (b"a", b"b"))
    partial = parse_worker(mdp.worker_reply(b"CLIENT", b"a", final=False))
    assert (partial.command, partial.body) == (mdp.W_PARTIAL, (b"a",))
    assert parse_worker(mdp.heartbeat()).command == mdp.W_HEARTBEAT
    assert parse_worker(mdp.disconnect()).command == mdp.W_DISCONNECT


@pytest.mark.parametrize("frames", [
    [b"MDPW02"],                                          # no command
    [b"MDPW02", b"\x01"],                                 # READY without service
    [b"MDPW02", b"\x01", b"echo", b"extra"],              # READY is exactly 3 frames
    [b"MDPW02", b"\x01", b"bad name"],
    [b"MDPW02", b"\x02", b"C", b"", b"x"],                # REQUEST is broker -> worker
    [b"MDPW02", b"\x04", b"C", b"x"],                     # no empty delimiter
    [b"MDPW02", b"\x04", b"C", b"nonempty", b"x"],
    [b"MDPW02", b"\x04", b"", b"", b"x"],                 # empty client address
    [b"MDPW02", b"\x04", b"C", b""],                      # no body
    [b"MDPW02", b"\x05", b"x"],                           # HEARTBEAT is exactly 2 frames
    [b"MDPW02", b"\x06", b""],
    [b"MDPW02", b"\x07"],                                 # unknown command
    [b"MDPW02", b"\x00"],
    [b"MDPW02", b"\x01\x01", b"echo"],
])
def test_parse_worker_rejects(frames: list[bytes]) -> None:
    with pytest.raises(ProtocolError):
        parse_worker(frames)


worker_tails = st.tuples(
    st.one_of(st.sampled_from([bytes([i]) for i in range(8)]), st.binary(max_size=3)),
    st.lists(st.one_of(st.just(b""), st.binary(max_size=12)), max_size=6),
)


@given(worker_tails)
def test_parse_worker_raises_only_protocol_error(tail: tuple[bytes, list[bytes]]) -> None:
    frames = [b"MDPW02", tail[0], *tail[1]]
    try:
        cmd = parse_worker(frames)
    except ProtocolError:
        return
    assert cmd.command in (mdp.W_READY, mdp.W_PARTIAL, mdp.W_FINAL, mdp.W_HEARTBEAT,
                           mdp.W_DISCONNECT)


@given(st.lists(st.binary(max_size=12), max_size=8))
def test_parse_client_raises_only_protocol_error(frames: list[bytes]) -> None:
    try:
        req = parse_client(frames)
    except ProtocolError:
        return
    assert valid_service_name(req.service) and len(req.body) >= 1


printable = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1,
                    max_size=255).map(str.encode)


@given(printable, st.lists(st.binary(max_size=20), min_size=1, max_size=4))
def test_client_request_round_trips(service: bytes, body: list[bytes]) -> None:
    req = parse_client(mdp.client_request(service, *body))
    assert (req.service, req.body) == (service, body)
