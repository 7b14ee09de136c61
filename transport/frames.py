"""Multipart send/receive for the broker's hot path, without pyzmq's per-call Python layers.

``Socket.send_multipart`` type-checks every frame and goes through the Python-level
``Socket.send`` for each; ``recv_multipart`` reads RCVMORE with ``getsockopt``, which builds a
``SocketOption`` enum on every call: several times the cost of the frames' own work on a
small message (bench/ measures the broker's throughput).
All are non-blocking and raise ``zmq.ZMQError`` (``zmq.Again``: nothing waiting / queue full).

With CURVE on, :func:`recv_message` also returns the first frame, whose metadata says who
sent it (:func:`user_id`): a ZAP User-Id exists only for a connection of the CURVE listener.
"""

from __future__ import annotations

from typing import Any

import zmq
from zmq.backend import Socket as _Raw
from zmq.backend import zmq_poll

__all__ = ["PollItems", "poll_items", "recv_frames", "recv_message", "send_frames", "user_id",
           "zmq_poll"]

_send = _Raw.send
_recv = _Raw.recv
# Plain ints: pyzmq's enum members would be converted on every call.
_MORE = int(zmq.SNDMORE | zmq.NOBLOCK)
_NOBLOCK = int(zmq.NOBLOCK)
_POLLIN = int(zmq.POLLIN)


def send_frames(sock: zmq.Socket[Any], frames: list[bytes]) -> None:
    """``sock.send_multipart(frames, zmq.NOBLOCK)``."""
    last = len(frames) - 1
    for i in range(last):
        _send(sock, frames[i], _MORE)
    _send(sock, frames[last], _NOBLOCK)


def recv_frames(sock: zmq.Socket[Any]) -> list[bytes]:
    """``sock.recv_multipart(zmq.NOBLOCK)``; a Frame's ``more`` is cheaper than RCVMORE."""
    frame = _recv(sock, _NOBLOCK, False)
    frames = [frame.bytes]
    while frame.more:
        frame = _recv(sock, _NOBLOCK, False)
        frames.append(frame.bytes)
    return frames


def recv_message(sock: zmq.Socket[Any]) -> tuple[list[bytes], zmq.Frame]:
    """:func:`recv_frames`, and the first frame, for its metadata (:func:`user_id`)."""
    first = frame = _recv(sock, _NOBLOCK, False)
    frames = [frame.bytes]
    while frame.more:
        frame = _recv(sock, _NOBLOCK, False)
        frames.append(frame.bytes)
    return frames, first


def user_id(frame: zmq.Frame) -> str | None:
    """The ZAP User-Id of the connection ``frame`` came on; None if it has none (a peer of
    the plain endpoint: ZAP never saw it). Without one, libzmq's error costs an exception:
    asked only of REQUEST and READY."""
    try:
        value = frame.get("User-Id")
    except zmq.ZMQError:
        return None
    return value if isinstance(value, str) else None


PollItems = list[tuple[zmq.Socket[Any], int]]


def poll_items(sock: zmq.Socket[Any]) -> PollItems:
    """For ``zmq_poll(items, 0)``: truthy while a message is waiting on ``sock``."""
    return [(sock, _POLLIN)]
