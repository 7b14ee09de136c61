"""Majordomo MDP/0.2 (ZeroMQ RFC 18) frames, as the RFC text defines them, plus MMI (RFC 8).

Frames below never include the ROUTER identity frame. Parsing is pure: it takes the frames
a socket received and returns a command, or raises :class:`ProtocolError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

CLIENT: Final = b"MDPC02"
WORKER: Final = b"MDPW02"

# MDP/Client commands.
C_REQUEST: Final = b"\x01"
C_PARTIAL: Final = b"\x02"
C_FINAL: Final = b"\x03"

# MDP/Worker commands.
W_READY: Final = b"\x01"
W_REQUEST: Final = b"\x02"
W_PARTIAL: Final = b"\x03"
W_FINAL: Final = b"\x04"
W_HEARTBEAT: Final = b"\x05"
W_DISCONNECT: Final = b"\x06"

WORKER_COMMANDS: Final = {
    W_READY: "READY", W_REQUEST: "REQUEST", W_PARTIAL: "PARTIAL", W_FINAL: "FINAL",
    W_HEARTBEAT: "HEARTBEAT", W_DISCONNECT: "DISCONNECT",
}
CLIENT_COMMANDS: Final = {C_REQUEST: "REQUEST", C_PARTIAL: "PARTIAL", C_FINAL: "FINAL"}

PASSIVE: Final = b"passive"
"""The one frame after DISCONNECT from a broker of a pair that does not serve (ours, beyond
RFC 18; a worker that reads only the command sees a plain DISCONNECT): no refusal of the
worker, which comes back within a heartbeat (transport/worker.py; docs/operations.md, "A
broker pair")."""

MMI_PREFIX: Final = b"mmi."
MMI_SERVICE: Final = b"mmi.service"

MAX_SERVICE_NAME: Final = 255


class ProtocolError(ValueError):
    """Frames that are not a valid MDP/0.2 command."""


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """C → B: REQUEST."""

    service: bytes
    body: list[bytes]


@dataclass(frozen=True, slots=True)
class WorkerCommand:
    """W → B: READY (service set), PARTIAL / FINAL (client and body set), HEARTBEAT, DISCONNECT."""

    command: bytes
    service: bytes = b""
    client: bytes = b""
    body: tuple[bytes, ...] = ()


def valid_service_name(name: bytes) -> bool:
    """A printable ASCII string of 1..255 bytes (RFC 18: 'printable string')."""
    return 0 < len(name) <= MAX_SERVICE_NAME and all(0x21 <= b <= 0x7E for b in name)


def parse_client(frames: list[bytes]) -> ClientRequest:
    """Frames after the MDPC02 header was recognised: 0x01, service, body..."""
    if len(frames) < 4:
        raise ProtocolError(f"client command needs at least 4 frames, got {len(frames)}")
    if frames[1] != C_REQUEST:
        raise ProtocolError(f"client command {frames[1]!r} is not REQUEST (0x01)")
    if not valid_service_name(frames[2]):
        raise ProtocolError("service name must be 1-255 printable ASCII bytes")
    return ClientRequest(service=frames[2], body=frames[3:])


def parse_worker(frames: list[bytes]) -> WorkerCommand:
    """Frames of a worker command whose header is MDPW02."""
    if len(frames) < 2:
        raise ProtocolError("worker command needs at least 2 frames")
    command = frames[1]
    if command == W_READY:
        if len(frames) != 3 or not valid_service_name(frames[2]):
            raise ProtocolError("READY needs exactly one printable service name frame")
        return WorkerCommand(W_READY, service=frames[2])
    if command in (W_PARTIAL, W_FINAL):
        if len(frames) < 5 or frames[3] != b"" or not frames[2]:
            raise ProtocolError("PARTIAL/FINAL need client address, empty frame, body")
        return WorkerCommand(command, client=frames[2], body=tuple(frames[4:]))
    if command in (W_HEARTBEAT, W_DISCONNECT):
        if len(frames) != 2:
            raise ProtocolError("HEARTBEAT/DISCONNECT take no frames after the command")
        return WorkerCommand(command)
    if command == W_REQUEST:
        raise ProtocolError("REQUEST is a broker-to-worker command")
    raise ProtocolError(f"unknown worker command {command!r}")


# Builders: the frames a peer sends (without the ROUTER identity frame).

def client_request(service: bytes, *body: bytes) -> list[bytes]:
    return [CLIENT, C_REQUEST, service, *body]


def client_reply(
    service: bytes, body: list[bytes] | tuple[bytes, ...], final: bool = True
) -> list[bytes]:
    return [CLIENT, C_FINAL if final else C_PARTIAL, service, *body]


def worker_ready(service: bytes) -> list[bytes]:
    return [WORKER, W_READY, service]


def worker_request(client: bytes, body: list[bytes] | tuple[bytes, ...]) -> list[bytes]:
    return [WORKER, W_REQUEST, client, b"", *body]


def worker_reply(client: bytes, *body: bytes, final: bool = True) -> list[bytes]:
    return [WORKER, W_FINAL if final else W_PARTIAL, client, b"", *body]


def heartbeat() -> list[bytes]:
    return [WORKER, W_HEARTBEAT]


def disconnect() -> list[bytes]:
    return [WORKER, W_DISCONNECT]


def passive_disconnect() -> list[bytes]:
    """DISCONNECT from a broker of a pair that does not serve (:data:`PASSIVE`)."""
    return [WORKER, W_DISCONNECT, PASSIVE]
