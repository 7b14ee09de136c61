"""ZeroMQ socket monitors of the broker's listening sockets, turned into bus events."""

from __future__ import annotations

import socket
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from messages.events import PEER_CONNECTED, PEER_DISCONNECTED

EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
BATCH = 1000


def peer_address(fd: int) -> str:
    """``ip:port`` of the TCP peer on ``fd`` (a dup is made and closed), or "" if unknown."""
    try:
        dup = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return ""
    try:
        addr: Any = dup.getpeername()
    except OSError:
        return ""
    finally:
        dup.close()
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = f"[{addr[0]}]" if ":" in str(addr[0]) else str(addr[0])
        return f"{host}:{addr[1]}"
    return str(addr)


class SocketMonitor:
    """Watches ``target`` for ACCEPTED / DISCONNECTED; ``name`` labels the events."""

    def __init__(self, target: zmq.Socket[bytes], name: str) -> None:
        self.target = target
        self.name = name
        self.socket: zmq.Socket[bytes] = target.get_monitor_socket(EVENTS)
        self.socket.setsockopt(zmq.LINGER, 0)
        # The fd is closed by the time DISCONNECTED is read, so remember who it was.
        self._peers: dict[int, str] = {}

    def drain(self) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """The (topic, data) events waiting on the monitor socket (up to BATCH), and whether
        more may be waiting."""
        out: list[tuple[str, dict[str, Any]]] = []
        for _ in range(BATCH):
            try:
                msg = recv_monitor_message(self.socket, zmq.NOBLOCK)
            except zmq.Again:
                return out, False
            fd = int(msg["value"])
            if msg["event"] == zmq.EVENT_ACCEPTED:
                topic, peer = PEER_CONNECTED, peer_address(fd)
                self._peers[fd] = peer
            elif msg["event"] == zmq.EVENT_DISCONNECTED:
                topic, peer = PEER_DISCONNECTED, self._peers.pop(fd, "")
            else:
                continue
            endpoint = msg["endpoint"].decode("utf-8", "replace")
            out.append((topic, {"socket": self.name, "endpoint": endpoint, "fd": fd,
                                "peer": peer}))
        return out, True

    def close(self) -> None:
        """Stop monitoring first: closing the PAIR while monitored hung the I/O thread."""
        self.target.disable_monitor()
        self.socket.close(0)
