"""The MDP/0.2 state machine (ZeroMQ RFC 18, MMI from RFC 8): services, workers, queues.

It owns no loop: the broker feeds it every message the ROUTER received (:meth:`handle`) and
calls :meth:`tick` every heartbeat interval. The message path does dict lookups and deque
moves and never decodes a body.

Authorization (docs/protocol.md, "CURVE and identity"): the broker hands ``handle`` the first frame
of each message, whose metadata names the sender's door (its ZAP User-Id):

- the actors' services (:data:`broker.tree_door.TREE_SERVICES`) may be served only from the
  tree's own door (User-Id ``@tree``): a READY for one of them from anywhere else (the plain
  loopback endpoint, the CURVE listener, an SSH tunnel to either) is refused as below;
- a peer authenticated as ``M`` (its ZAP User-Id) may be a worker of ``agent.M`` only: a READY
  for any other service (another machine's, or an actor's) is answered DISCONNECT, as RFC 18
  does for a command it will not take, and reported (``refused``);
- the address a worker is given for a client carries the client's identity
  (:mod:`transport.peer_id`), so that the dispatcher knows who sent a report; the broker maps a
  reply back to the client's routing id itself (it keeps it with the request);
- that address does not show the client's routing id, but a keyed hash of it: an agent
  (a worker) that learnt the routing ids of the dispatcher's sockets could claim one of them
  when it connects, and libzmq would either hand it that connection (ROUTER_HANDOVER, which
  is off with CURVE for that reason) or abort the broker on a collision with the next
  routing id it generates (an assertion in libzmq 4.3.5, measured).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import deque
from collections.abc import Callable
from typing import Any

import zmq
from loguru import logger

from broker.tree_door import TREE_SERVICES, TREE_USER_ID
from runtime.settings import Settings
from transport.frames import send_frames, user_id
from transport.mdp import (
    C_FINAL,
    C_PARTIAL,
    C_REQUEST,
    CLIENT,
    MMI_PREFIX,
    MMI_SERVICE,
    W_DISCONNECT,
    W_FINAL,
    W_HEARTBEAT,
    W_PARTIAL,
    W_READY,
    W_REQUEST,
    WORKER,
    passive_disconnect,
    valid_service_name,
)
from transport.peer_id import PERSON_PREFIX, TAG, client_address

MAX_QUEUE = 100_000  # requests waiting per service; past it new ones are dropped

# The client address given to the worker (transport.peer_id), body frames, queued at, and the
# client's routing id.
Request = tuple[bytes, list[bytes], float, bytes]
Report = Callable[[list[bytes], str], None]  # (frames, reason) of a dropped message
# (routing id, authenticated identity, service, reason) of a READY that was refused.
Refused = Callable[[bytes, str, bytes, str], None]
AGENT_PREFIX = b"agent."
MAX_MASKS = 100_000  # clients whose masked address is kept; then the cache starts again


class Service:
    """A request queue and the workers serving it (``waiting`` is LRU: popleft = oldest)."""

    __slots__ = ("name", "orphaned_since", "requests", "waiting", "workers")

    def __init__(self, name: bytes, now: float) -> None:
        self.name = name
        self.requests: deque[Request] = deque()
        self.waiting: deque[Worker] = deque()
        self.workers = 0
        self.orphaned_since = now  # since when it has had no worker: expiry counts from it


class Worker:
    """A READY'd worker; ``request`` is the one it holds (None while waiting)."""

    __slots__ = ("expiry", "identity", "request", "sent_at", "service")

    def __init__(self, identity: bytes, service: Service, expiry: float) -> None:
        self.identity = identity
        self.service = service
        self.expiry = expiry
        self.request: Request | None = None
        self.sent_at = float("-inf")  # when we last gave it a REQUEST (heartbeats: tick)


class Majordomo:
    """Routes requests to workers of a service over ``router``; ``report`` hears of bad input."""

    def __init__(self, router: zmq.Socket[Any], settings: Settings, report: Report,
                 refused: Refused | None = None) -> None:
        self.router = router
        self.report = report
        self.refused = refused
        self.worker_ttl = settings.heartbeat_expiry_s
        # A worker given a REQUEST this recently gets no HEARTBEAT at the next tick (RFC 18:
        # any command counts as one, and peers SHOULD NOT send HEARTBEAT while sending other
        # commands). Half an interval: the worker still hears from us at least every 1.5
        # intervals, well inside its liveness of several intervals.
        self.quiet_s = settings.heartbeat_interval_s / 2
        self.request_expiry_s = settings.request_expiry_s
        self.max_body = settings.max_message_bytes
        self.curve = settings.curve  # clients may be authenticated: addresses say who
        self.services: dict[bytes, Service] = {}
        self.workers: dict[bytes, Worker] = {}
        self.stats = dict.fromkeys(
            ("undeliverable", "workers_lost", "workers_expired", "requests_expired",
             "requests_requeued", "queue_full", "workers_refused"), 0)
        self.now = 0.0  # set by the loop once per wake-up: one clock read per batch
        self._mask_key = os.urandom(16)
        self._masks: dict[bytes, bytes] = {}  # routing id -> what workers see of it
        # More mmi.* services the broker answers itself: name -> the reply's body.
        self.mmi: dict[bytes, Callable[[], bytes]] = {}

    def handle(self, frames: list[bytes], first: zmq.Frame | None = None) -> None:
        """One message as the ROUTER received it (identity frame first); ``first``, its first
        frame, whose metadata names the sender's door (None: no door is trusted)."""
        n = len(frames)
        if n < 3:
            self.report(frames, "too few frames")
            return
        header = frames[1]
        if header == CLIENT:
            if frames[2] != C_REQUEST:
                self.report(frames, "client command is not REQUEST (0x01)")
                return
            if n < 5:
                self.report(frames, "REQUEST needs a service and a body")
                return
            body = frames[4:]
            if (len(body[0]) if n == 5 else sum(map(len, body))) > self.max_body:
                self.report(frames, "body too large")
                return
            name = frames[3]
            service = self.services.get(name)
            if service is None:
                if not valid_service_name(name):
                    self.report(frames, "service name is not 1-255 printable bytes")
                    return
                if name.startswith(MMI_PREFIX):
                    self._mmi(frames[0], name, body)
                    return
                service = self.services[name] = Service(name, self.now)
            if len(service.requests) >= MAX_QUEUE:
                self.stats["queue_full"] += 1
                return
            routing = frames[0]
            # Every door but the plain one gives a User-Id: the tree's, a person's (the
            # people's door) or an agent's (CURVE). Workers are told which.
            uid = user_id(first) if first is not None else None
            if self.curve:
                address = client_address(self._masked(routing), uid)
            elif uid is not None or routing.startswith(TAG):
                address = client_address(routing, uid)
            else:
                address = routing
            service.requests.append((address, body, self.now, routing))
            if service.waiting:
                self._assign(service)
        elif header == WORKER:
            self._handle_worker(frames, n, first)
        else:
            self.report(frames, "unknown protocol header")

    def _handle_worker(self, frames: list[bytes], n: int, first: zmq.Frame | None) -> None:
        identity, command = frames[0], frames[2]
        worker = self.workers.get(identity)
        if command in (W_FINAL, W_PARTIAL):
            client = frames[3] if n >= 6 else b""
            if not client or frames[4] != b"":
                self._invalid(worker, frames, "PARTIAL/FINAL need client, empty frame, body")
                return
            if worker is None:
                self._unexpected(identity, frames, "reply from a worker not READY")
                return
            worker.expiry = self.now + self.worker_ttl
            request = worker.request
            if request is None or request[0] != client:
                self.report(frames, "reply for a client this worker was not given")
                return
            service = worker.service
            final = command == W_FINAL
            if final:
                # Hand the worker its next request before relaying: it is the bottleneck.
                worker.request = None
                service.waiting.append(worker)
                if service.requests:
                    self._assign(service)
            body = frames[5:]
            if (len(body[0]) if n == 6 else sum(map(len, body))) > self.max_body:
                # Dropped, but the request counts as served: resending it elsewhere would
                # only make another worker produce the same oversized reply.
                self.report(frames, "reply body too large")
                return
            self._send_quiet([request[3], CLIENT, C_FINAL if final else C_PARTIAL,
                              service.name, *body])
        elif command == W_HEARTBEAT:
            if n != 3:
                self._invalid(worker, frames, "HEARTBEAT takes no more frames")
            elif worker is None:
                self._unexpected(identity, frames, "HEARTBEAT from a worker not READY")
            else:
                worker.expiry = self.now + self.worker_ttl
        elif command == W_READY:
            name = frames[3] if n == 4 else b""
            if not valid_service_name(name) or name.startswith(MMI_PREFIX):
                self._invalid(worker, frames, "READY needs one service name (not mmi.*)")
            elif worker is not None:
                self._unexpected(identity, frames, "second READY")
            elif (refusal := _refusal(name, first)) is not None:
                self._refuse(identity, *refusal, name)
            else:
                self._register(identity, name)
        elif command == W_DISCONNECT:
            if n != 3:
                self._invalid(worker, frames, "DISCONNECT takes no more frames")
            elif worker is not None:  # it MAY come before READY: nothing to forget then
                self._forget(worker, "sent DISCONNECT")
        elif command == W_REQUEST:
            self._invalid(worker, frames, "REQUEST is a broker-to-worker command")
        else:
            self._invalid(worker, frames, "unknown worker command")

    def _register(self, identity: bytes, name: bytes) -> None:
        service = self.services.get(name)
        if service is None:
            service = self.services[name] = Service(name, self.now)
        worker = Worker(identity, service, self.now + self.worker_ttl)
        self.workers[identity] = worker
        service.workers += 1
        service.waiting.append(worker)
        logger.debug("broker: worker {} ready for {!r}", identity.hex(), name)
        if service.requests:
            self._assign(service)

    def _masked(self, routing: bytes) -> bytes:
        """What workers see of a routing id: a keyed hash (module docstring), starting with
        0x01 so that it is never taken for an address with an identity."""
        masked = self._masks.get(routing)
        if masked is None:
            if len(self._masks) >= MAX_MASKS:
                self._masks.clear()
            masked = self._masks[routing] = b"\x01" + hashlib.blake2b(
                routing, key=self._mask_key, digest_size=15).digest()
        return masked

    def _refuse(self, identity: bytes, uid: str, reason: str, name: bytes) -> None:
        """A peer asked to serve what is not its own to serve (:func:`_refusal`)."""
        self.stats["workers_refused"] += 1
        self._send_quiet([identity, WORKER, W_DISCONNECT])
        logger.debug("broker: READY for {!r} from {} refused: {}", name, identity.hex(), reason)
        if self.refused is not None:
            self.refused(identity, uid, name, reason)

    def _assign(self, service: Service) -> None:
        """Give queued requests to waiting workers: oldest request, least recently used."""
        router = self.router
        while service.requests and service.waiting:
            worker = service.waiting.popleft()
            request = service.requests.popleft()
            try:
                send_frames(router, [worker.identity, WORKER, W_REQUEST, request[0], b"",
                                     *request[1]])
            except zmq.ZMQError:
                # Gone (EHOSTUNREACH) or wedged (EAGAIN): the request waits for another.
                service.requests.appendleft(request)
                self.stats["workers_lost"] += 1
                self._forget(worker, "unreachable")
                continue
            worker.request = request
            worker.sent_at = self.now

    def _forget(self, worker: Worker, reason: str) -> None:
        """Remove ``worker``; the request it held goes back to the head of its queue."""
        if self.workers.pop(worker.identity, None) is None:
            return
        service = worker.service
        service.workers -= 1
        if worker.request is not None:
            # RFC 18 goal: recover from dead workers by resending to another worker.
            service.requests.appendleft(worker.request)
            worker.request = None
            self.stats["requests_requeued"] += 1
        else:
            with contextlib.suppress(ValueError):
                service.waiting.remove(worker)
        logger.debug("broker: worker {} of {!r} removed: {}", worker.identity.hex(),
                     service.name, reason)
        if service.workers == 0:
            service.orphaned_since = self.now
            if not service.requests:
                del self.services[service.name]
        elif service.requests and service.waiting:
            self._assign(service)

    def _mmi(self, client: bytes, name: bytes, body: list[bytes]) -> None:
        """RFC 8: the broker answers ``mmi.*`` itself."""
        if name == MMI_SERVICE:
            service = self.services.get(body[0])
            code = b"200" if service is not None and service.workers else b"404"
        elif (answer := self.mmi.get(name)) is not None:
            code = answer()
        else:
            code = b"501"
        self._send_quiet([client, CLIENT, C_FINAL, name, code])

    def _send_quiet(self, frames: list[bytes]) -> None:
        """Send to a peer that may be gone (EHOSTUNREACH) or not reading: then drop."""
        try:
            send_frames(self.router, frames)
        except zmq.ZMQError:
            self.stats["undeliverable"] += 1

    def _invalid(self, worker: Worker | None, frames: list[bytes], reason: str) -> None:
        """RFC 18: drop an invalid message and treat the peer as invalid (a worker is let go)."""
        self.report(frames, reason)
        if worker is not None:
            self._unexpected(worker.identity, None, reason)

    def _unexpected(self, identity: bytes, frames: list[bytes] | None, reason: str) -> None:
        """RFC 18: a valid but unexpected command gets DISCONNECT and no further commands."""
        if frames is not None:
            self.report(frames, reason)
        self._send_quiet([identity, WORKER, W_DISCONNECT])
        worker = self.workers.get(identity)
        if worker is not None:
            self._forget(worker, reason)

    def tick(self, now: float) -> None:
        """Heartbeat the workers we have not just sent a REQUEST, drop the silent ones, expire
        requests nobody can serve."""
        self.now = now
        for worker in list(self.workers.values()):
            if self.workers.get(worker.identity) is not worker:
                continue  # already let go while another worker was being dropped
            if worker.expiry < now:
                self.stats["workers_expired"] += 1
                self._forget(worker, "silent past liveness")
                continue
            if now - worker.sent_at < self.quiet_s:
                continue  # it just had a REQUEST: that was its heartbeat
            try:
                send_frames(self.router, [worker.identity, WORKER, W_HEARTBEAT])
            except zmq.ZMQError:
                self.stats["workers_lost"] += 1
                self._forget(worker, "unreachable")
        cutoff = now - self.request_expiry_s
        expired: dict[bytes, int] = {}
        for service in list(self.services.values()):
            if service.workers or service.orphaned_since > cutoff:
                continue
            before = len(service.requests)
            service.requests = deque(r for r in service.requests if r[2] > cutoff)
            if len(service.requests) < before:
                expired[service.name] = before - len(service.requests)
            if not service.requests:
                del self.services[service.name]
        if expired:
            # One line per tick, however many services: a flood must not become a log flood.
            total = sum(expired.values())
            self.stats["requests_expired"] += total
            names = ", ".join(f"{k.decode()} x{v}" for k, v in list(expired.items())[:5])
            more = f" (+{len(expired) - 5} services)" if len(expired) > 5 else ""
            logger.warning("broker: {} queued request(s) expired, no worker for {}s: {}{}",
                           total, self.request_expiry_s, names, more)

    def forget_all(self) -> None:
        """DISCONNECT every worker and drop every queue: a broker of a pair stepping down
        (broker/binary_star.py), saying it is passive (transport/mdp.py, ``PASSIVE``); the
        clients' retries go to the other broker."""
        for identity in list(self.workers):
            self._send_quiet([identity, *passive_disconnect()])
        self.workers.clear()
        self.services.clear()

    def disconnect_all(self) -> None:
        """DISCONNECT every worker (at shutdown: RFC 18 has them re-register on a new socket)."""
        for identity in list(self.workers):
            self._send_quiet([identity, WORKER, W_DISCONNECT])


def _refusal(name: bytes, first: zmq.Frame | None) -> tuple[str, str] | None:
    """(the sender's User-Id or "", why) if the sender of a READY for ``name`` may not serve
    it; None if it may (module docstring)."""
    uid = user_id(first) if first is not None else None
    if uid == TREE_USER_ID:
        return None
    if name in TREE_SERVICES:
        return uid or "", (f"{name.decode()!r} is served by the tree's own processes only "
                           "(from its door, tree_endpoint)")
    if uid is not None and uid.startswith(PERSON_PREFIX):
        return uid, "the people's door (control_endpoint) serves no service"
    if uid is not None and name != AGENT_PREFIX + uid.encode():
        return uid, f"a peer authenticated as {uid!r} may only serve 'agent.{uid}'"
    return None
