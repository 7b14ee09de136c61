"""The bench agents' connections and loop (bench/bench_agent.py).

:class:`FastWorker` is transport.worker.Worker reading only what waits; :class:`Requests` is
agent.protocol.outbox.Outbox on a client socket of its own, for pre-encoded requests; :class:`Host`
runs many agents in one loop that waits on their sockets' ZMQ_FDs with epoll, so a wake-up
costs what is ready, not a zmq_poll of every socket.
"""

from __future__ import annotations

import contextlib
import heapq
import select
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zmq
from bench_wire import check_wire, reply_of
from loguru import logger

from agent.protocol.outbox import backoff
from transport import mdp
from transport.frames import poll_items, recv_frames, send_frames, zmq_poll
from transport.worker import Request, Worker

DISPATCHER = b"dispatcher"


class FastWorker(Worker):
    """transport.worker.Worker whose drain reads while a message waits, instead of until a
    receive fails: that zmq.Again costs about 3.5 us (an exception, and an import in
    ZMQError.__init__) on every drain."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._polled, self._items = self.socket, poll_items(self.socket)

    def drain(self) -> list[Request]:
        requests: list[Request] = []
        if self.socket is not self._polled:  # a new one, since a reconnection
            self._polled, self._items = self.socket, poll_items(self.socket)
        while zmq_poll(self._items, 0):
            frames = recv_frames(self.socket)
            self.heard_at = time.monotonic()
            command = frames[1] if len(frames) >= 2 and frames[0] == mdp.WORKER else None
            if command == mdp.W_REQUEST and len(frames) >= 5 and frames[3] == b"":
                self.requested = True
                requests.append(Request(client=frames[2], body=frames[4:]))
            elif command == mdp.W_DISCONNECT:
                self._disconnected()  # Worker's own: register again
                return requests
            elif command != mdp.W_HEARTBEAT:
                logger.warning("worker {}: unexpected {!r}", self.service.decode(), frames[:2])
        return requests


OnReply = Callable[[str, dict[str, Any], float], bool]
"""(type, body, now) of an answer; True if it settles the request."""


@dataclass(slots=True)
class _Request:
    key: str
    msg_id: str
    frames: list[bytes]
    on_reply: OnReply
    sent: int = 0
    sent_at: float = 0.0
    due_at: float | None = 0.0  # when to send (again); None: sent, its answer awaited
    expires: float = 0.0  # ... until then


class Requests:
    """agent.protocol.outbox.Outbox on a client socket of our own: requests keyed by name, each
    sent again (same bytes, same envelope id) on the agent's backoff until an answer
    settles it; a new request under a key replaces the old one."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str) -> None:
        sock: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)  # the options of transport.client.Client's socket
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        sock.connect(endpoint)
        self.socket = sock
        self._items = poll_items(sock)
        self._by_key: dict[str, _Request] = {}
        self._by_id: dict[str, _Request] = {}
        self.fired = 0  # requests sent so far

    def __len__(self) -> int:
        return len(self._by_key)

    def send(self, key: str, msg_id: str, data: bytes, on_reply: OnReply, now: float,
             delay_s: float = 0.0) -> None:
        """Send to the dispatcher now, or at the first :meth:`tick` ``delay_s`` later."""
        old = self._by_key.get(key)
        if old is not None:
            self._by_id.pop(old.msg_id, None)
        req = _Request(key, msg_id, [mdp.CLIENT, mdp.C_REQUEST, DISPATCHER, data], on_reply)
        self._by_key[key] = self._by_id[msg_id] = req
        if delay_s > 0:
            req.due_at = now + delay_s
        else:
            self._fire(req, now)

    def _fire(self, req: _Request, now: float) -> None:
        req.expires = now + backoff(req.sent)
        req.sent += 1
        req.sent_at, req.due_at = now, None
        self.fired += 1
        with contextlib.suppress(zmq.Again):  # the timeout sends it again
            send_frames(self.socket, req.frames)

    def drain(self, now: float) -> None:
        """Handle every answer waiting."""
        while zmq_poll(self._items, 0):
            reply = reply_of(recv_frames(self.socket))
            req = self._by_id.get(reply[1]) if reply is not None else None
            if reply is None or req is None:
                continue  # not an answer, or to a request replaced or settled meanwhile
            if req.on_reply(reply[0], reply[2], now):
                self._by_id.pop(req.msg_id, None)
                if self._by_key.get(req.key) is req:  # on_reply may have sent anew under key
                    del self._by_key[req.key]
            else:  # answered, not as hoped: wait out this try's delay, as Outbox does
                req.due_at = req.sent_at + backoff(req.sent - 1)

    def tick(self, now: float) -> bool:
        """Send what is due: delayed requests, and those whose answer did not come in time;
        True if it sent anything."""
        due = [req for req in self._by_key.values()
               if (req.expires if req.due_at is None else req.due_at) <= now]
        for req in due:
            self._fire(req, now)
        return bool(due)

    def close(self) -> None:
        self.socket.close(0)



class Hosted(Protocol):
    """What a :class:`Host` runs (bench_agent.BenchAgent)."""

    host: Host | None
    wiring: int  # +1 each time a socket is replaced: the Host then waits on the new one

    @property
    def sockets(self) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]: ...

    def serve(self, now: float) -> bool:
        """Handle what waits on its sockets; True if it sent anything meanwhile."""

    def tick(self, now: float) -> bool:
        """Heartbeats and re-sends; True if it sent anything."""

    def close(self) -> None: ...


class Host:
    """One loop for many bench agents: epoll on their sockets' ZMQ_FDs, timers, ticks.

    A ZMQ_FD only says "look at this socket", and sending on a socket can consume that
    signal: an agent that sent anything is looked at again on the next pass, without
    waiting (as the broker's loop does). One that only read, down to "nothing waiting", need
    not be: whatever comes next signals its ZMQ_FD again.
    """

    TICK_S = 0.25  # heartbeats (1 s) and re-sends (1 s and more) need no finer clock
    DONE_EVERY_S = 0.005  # run_until's done() may look at every agent: not at every pass

    def __init__(self, agents: Sequence[Hosted],
                 check: Callable[[], None] | None = None) -> None:
        check_wire()
        self.agents = agents
        self.check = check  # called twice a second while serving: raises to give up
        self._epoll = select.epoll()
        self._fds: dict[int, Hosted] = {}
        self._watched: dict[Hosted, tuple[int, list[int]]] = {}  # wiring, fds
        self._pending: set[Hosted] = set(agents)
        self._timers: list[tuple[float, int, Hosted, Callable[[float], object]]] = []
        self._seq = 0
        self._next_tick = 0.0
        for agent in agents:
            agent.host = self
            self.watch(agent)

    def at(self, due: float, agent: Hosted, fn: Callable[[float], object]) -> None:
        """Call ``fn(now)`` for ``agent`` once ``due`` (monotonic) has come."""
        self._seq += 1
        heapq.heappush(self._timers, (due, self._seq, agent, fn))

    def watch(self, agent: Hosted) -> None:
        """Wait on ``agent``'s sockets (again, after a reconnection replaced one)."""
        old = self._watched.get(agent)
        if old is not None and old[0] == agent.wiring:
            return
        for fd in old[1] if old is not None else ():
            if self._fds.get(fd) is agent:  # not a number reused by another agent since
                del self._fds[fd]
                with contextlib.suppress(OSError):  # closed: epoll dropped it already
                    self._epoll.unregister(fd)
        fds = [sock.FD for sock in agent.sockets]
        for fd in fds:
            self._fds[fd] = agent
            try:
                self._epoll.register(fd, select.EPOLLIN)
            except FileExistsError:
                self._epoll.modify(fd, select.EPOLLIN)
        self._watched[agent] = (agent.wiring, fds)
        self._pending.add(agent)

    def forget(self, agent: Hosted) -> None:
        """Stop serving ``agent`` (its sockets are about to close: a process killed)."""
        _wiring, fds = self._watched.pop(agent, (0, []))
        for fd in fds:
            if self._fds.get(fd) is agent:
                del self._fds[fd]
                with contextlib.suppress(OSError):
                    self._epoll.unregister(fd)
        self._pending.discard(agent)
        self._timers = [t for t in self._timers if t[2] is not agent]
        heapq.heapify(self._timers)

    def step(self, max_wait_s: float = 0.05) -> None:
        """One wait and everything it made ready: replies, requests, timers, ticks."""
        now = time.monotonic()
        if self._pending:
            wait = 0.0
        else:
            due = min(now + max_wait_s, self._next_tick)
            if self._timers:
                due = min(due, self._timers[0][0])
            wait = max(0.0, due - now)
        ready = self._epoll.poll(wait)
        now = time.monotonic()
        todo, self._pending = self._pending, set()
        fds = self._fds
        for fd, _ in ready:
            agent = fds.get(fd)
            if agent is not None:
                todo.add(agent)
        pending = self._pending
        for agent in todo:
            if agent.serve(now):
                pending.add(agent)
                self.watch(agent)
        timers = self._timers
        while timers and timers[0][0] <= now:
            _due, _seq, agent, fn = heapq.heappop(timers)
            fn(now)
            pending.add(agent)
        if now >= self._next_tick:
            self._next_tick = now + self.TICK_S
            for agent in self.agents:
                if agent.tick(now):
                    pending.add(agent)
                    self.watch(agent)

    def run_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Serve until ``done()``; False after ``timeout_s``. ``self.check`` may raise."""
        deadline = time.monotonic() + timeout_s
        next_check = next_done = 0.0
        while True:
            now = time.monotonic()
            if now >= next_done:
                if done():
                    return True
                next_done = now + self.DONE_EVERY_S
            if now > deadline:
                return False
            if self.check is not None and now >= next_check:
                self.check()
                next_check = now + 0.5
            self.step(min(0.05, max(0.0, next_done - now)))

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        self._epoll.close()


