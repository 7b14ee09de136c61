"""ZAP (RFC 27) for the broker's listeners, answered from the broker's own loop.

Served by a ROUTER the broker polls, not by a thread: every handshake is decided where the
broker can publish what it refused. Each listener that asks ZAP names a domain; a judge per
domain gives the verdict (broker/curve_listener.py for the CURVE listener, broker/tree_door.py for
the tree's own door). A domain nobody serves is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq
from loguru import logger

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # RFC 27: where libzmq sends its requests
ZAP_BATCH = 100


@dataclass(frozen=True, slots=True)
class Verdict:
    """A ZAP answer: status code (200 / 400 / 500), text, and User-Id for an allowed peer."""

    status: bytes
    text: str
    user_id: str = ""
    public_key: bytes = b""  # Z85, when the request carried a CURVE key


# A judge gets a ZAP request's frames after the routing id and the empty frame.
Judge = Callable[[list[bytes]], Verdict]
Refused = Callable[[list[bytes], Verdict], None]


class ZapServer:
    """Binds the ZAP endpoint (before any listener that asks it); poll :attr:`socket` and
    call :meth:`drain`."""

    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self.socket: zmq.Socket[bytes] = ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(ZAP_ENDPOINT)
        self._judges: dict[bytes, tuple[Judge, Refused]] = {}

    def serve(self, domain: bytes, judge: Judge, refused: Refused) -> None:
        """Answer requests of ``domain`` with ``judge``; ``refused`` hears of each refusal."""
        self._judges[domain] = (judge, refused)

    def drain(self) -> bool:
        """Answer up to ZAP_BATCH waiting requests; True if more may wait.

        True also after any answer: a send can consume the signal of the socket's ZMQ_FD, so
        the broker's loop must look again rather than wait for the fd (broker.py)."""
        answered = False
        for _ in range(ZAP_BATCH):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return answered
            if len(frames) < 3 or frames[1] != b"":
                continue  # not a ZAP request: nothing to answer
            request = frames[2:]
            if len(request) < 6 or request[0] != b"1.0":
                verdict, refused = Verdict(b"500", "malformed ZAP request"), None
            elif (served := self._judges.get(request[2])) is None:
                verdict, refused = Verdict(b"400", f"domain {request[2]!r} is not served"), None
            else:
                judge, refused = served
                verdict = judge(request)
            request_id = request[1] if len(request) > 1 else b""
            try:
                self.socket.send_multipart([frames[0], b"", b"1.0", request_id, verdict.status,
                                            verdict.text.encode(), verdict.user_id.encode(),
                                            b""], zmq.NOBLOCK)
            except zmq.ZMQError:
                logger.warning("broker: could not answer a ZAP request")
            answered = True
            if verdict.status != b"200" and refused is not None:
                refused(request, verdict)
        return True

    def close(self) -> None:
        self.socket.close(0)
