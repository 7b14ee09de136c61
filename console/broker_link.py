"""The console's requests to the actors, through the broker, without blocking the event loop.

Each call runs the project's blocking :class:`transport.client.SyncClient` (Lazy Pirate,
ErrorReply → CallFailed) on a small thread pool. A client is used by one thread at a time:
calls borrow one from an idle stack and give it back (the queue's lock is the memory
barrier ZeroMQ asks for when a socket changes threads); at most ``workers`` exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import zmq

from messages.base import Message
from transport.client import SyncClient


class BrokerLink:
    """``await link.call(service, message)`` → the reply body; raises CallFailed."""

    def __init__(self, endpoints: str | Sequence[str], workers: int = 4) -> None:
        # Both brokers of a pair: a call that times out moves its client to the other one
        # (transport/client.py), so the console follows a failover.
        self.endpoints = endpoints
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="console-broker")
        self._idle: queue.SimpleQueue[SyncClient] = queue.SimpleQueue()
        self._all: list[SyncClient] = []
        self._lock = threading.Lock()
        self._closed = False

    async def call(self, service: str, message: Message, timeout_s: float = 5.0,
                   retries: int = 0) -> Message:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._call, service, message,
                                          timeout_s, retries)

    def _call(self, service: str, message: Message, timeout_s: float, retries: int) -> Message:
        client = self._borrow()
        try:
            return client.call(service, message, timeout_s=timeout_s, retries=retries).body
        finally:
            self._idle.put(client)

    async def raw(self, service: str, *body: bytes, timeout_s: float = 2.0) -> list[bytes]:
        """The body frames of a raw request (``mmi.*``: the broker answers it itself)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._raw, service, body, timeout_s)

    def _raw(self, service: str, body: tuple[bytes, ...], timeout_s: float) -> list[bytes]:
        client = self._borrow()
        try:
            return client.raw(service, *body, timeout_s=timeout_s, retries=0)
        finally:
            self._idle.put(client)

    def _borrow(self) -> SyncClient:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._closed:
                raise RuntimeError("the broker link is closed")
            client = SyncClient(self.endpoints, self._ctx)
            self._all.append(client)
            return client

    def close(self) -> None:
        """Wait for the calls under way (each is bounded by its timeout), then close."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        for client in self._all:
            with contextlib.suppress(zmq.ZMQError):
                client.close()
        self._ctx.term()
