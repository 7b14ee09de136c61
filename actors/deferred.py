"""Deferred work: what a request handler must block for (an HTTP call), run on worker threads
while the loop goes on, its reply handed back to the loop to send.

The threads never touch a socket (sockets are not thread-safe): a job's outcome waits in a
queue, and the loop is woken (transport/poll_loop.py ``PollLoop.wake``) to deliver it.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from loguru import logger

from messages.base import Message
from messages.control import ErrorReply

R = TypeVar("R")
"""The request a job answers (whatever its owner needs to send the reply)."""


class Deferred(Message, type_name="actor.deferred"):
    """What a handler returns when its reply comes later from the pool; never sent."""


@dataclass(frozen=True, slots=True)
class Finished(Generic[R]):
    """A job's outcome, handed from its thread to the loop."""

    req: R
    reply: Message
    then: Callable[[Message], None] | None
    failure: str | None  # repr of the exception when the job raised


class DeferredPool(Generic[R]):
    """Up to ``workers`` jobs at once, on threads started at the first job."""

    def __init__(self, workers: int, name: str, wake: Callable[[], None]) -> None:
        """``name``: the owner's, in logs and thread names; ``wake``: from a thread, makes
        the owner's loop look at :meth:`finished`."""
        self.workers = workers
        self.name = name
        self._wake = wake
        self._pool: ThreadPoolExecutor | None = None
        self._finished: queue.SimpleQueue[Finished[R]] = queue.SimpleQueue()

    @property
    def started(self) -> bool:
        """Whether any job was ever submitted (the threads exist)."""
        return self._pool is not None

    def submit(self, req: R, work: Callable[[], Message],
               then: Callable[[Message], None] | None = None) -> Deferred:
        """Run ``work()`` on a thread; its reply (ErrorReply ``internal_error`` if it raises)
        comes back from :meth:`finished`."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers,
                                            thread_name_prefix=f"{self.name}-deferred")
        self._pool.submit(self._run, req, work, then)
        return Deferred()

    def _run(self, req: R, work: Callable[[], Message],
             then: Callable[[Message], None] | None) -> None:
        failure = None
        try:
            reply = work()
        except Exception as exc:
            logger.exception("{}: a deferred request failed", self.name)
            failure = repr(exc)
            reply = ErrorReply(code="internal_error", message=failure[:1000])
        self._finished.put(Finished(req, reply, then, failure))
        self._wake()

    def finished(self) -> Iterator[Finished[R]]:
        """The outcomes ready now (on the loop), without waiting."""
        while True:
            try:
                yield self._finished.get_nowait()
            except queue.Empty:
                return

    def wait(self, timeout_s: float) -> Finished[R]:
        """The next outcome, waiting up to ``timeout_s`` (in-process callers: tests);
        raises ``queue.Empty`` when none came."""
        return self._finished.get(timeout=timeout_s)

    def close(self) -> None:
        """Drop the jobs not started; running ones end by themselves (their deadline)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
