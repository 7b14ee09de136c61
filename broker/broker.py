"""The broker process: MDP/0.2 on a ROUTER, the bus proxy, socket monitors, one poll loop.

Single-threaded on purpose: all state (services, workers, queues) is touched by the loop
only, so nothing needs a lock. See :mod:`broker.majordomo` for the protocol itself.
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import zmq
from loguru import logger

from broker import control_door, tree_door
from broker.binary_star import Note, Pair
from broker.bus_proxy import BATCH, BusProxy
from broker.curve_listener import ZAP_DOMAIN, CurveListener
from broker.majordomo import Majordomo
from broker.pair_link import PairConfigError, PairLink, log_note
from broker.refusal_audit import RefusalAudit
from broker.socket_monitor import SocketMonitor
from broker.tree_door import TreeDoorError
from broker.zap import Verdict, ZapServer
from messages.events import BAD_MESSAGE, BROKER_STATE, PEER_REFUSED, WORKER_REFUSED
from runtime.liveness import BEAT_INTERVAL_S, Beacon
from runtime.logs import setup_logging
from runtime.rate_limit import RateLimit
from runtime.settings import Settings, settings_or_exit
from transport.curve_keys import CurveConfigError
from transport.frames import poll_items, recv_message, zmq_poll
from transport.peer_id import PERSON_PREFIX

HWM = 100_000
MMI_BROKER = b"mmi.broker"
BAD_EVENTS_PER_S = 50.0
PEER_EVENTS_PER_S = 200.0
SUMMARY_EVERY_S = 10.0
BENIGN = {"undeliverable", "requests_requeued"}  # counters that are no one's fault
BIND_ATTEMPTS = 40  # ~9 s: a restarted broker can race its predecessor's port release


class Broker:
    """``Broker(settings).run()`` serves until SIGTERM / SIGINT (or :meth:`stop`), returns 0."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.router: zmq.Socket[bytes] = self.ctx.socket(zmq.ROUTER)
        # Frames may carry a whole max-size body plus MDP framing.
        self.bus = BusProxy(self.ctx, settings.max_message_bytes + 64 * 1024)
        self.mdp = Majordomo(self.router, settings, self._bad, self._worker_refused)
        self._router_waiting = poll_items(self.router)
        self.monitors: list[SocketMonitor] = []
        self.curve: CurveListener | None = None  # with settings.curve (broker/curve_listener.py)
        self.zap: ZapServer | None = None  # ZAP for the tree's door and the CURVE listener
        self.audit = RefusalAudit(settings.data_dir)
        self.bad = 0
        self.errors = 0
        self._reported: dict[str, int] = {}
        self._stopping = False
        self._signal = ""
        self._bad_limit = RateLimit(BAD_EVENTS_PER_S)
        self._peer_limit = RateLimit(PEER_EVENTS_PER_S)
        self._error_log_limit = RateLimit(5.0)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        # One of a pair (docs/operations.md, "A broker pair"): MDP traffic goes through the
        # pair's decision first; mmi.broker says where this broker stands.
        self.pair: PairLink | None = None
        if settings.broker_role:
            self.pair = PairLink(self.ctx, settings, self.router, time.monotonic(),
                                 lambda frames, first: self.mdp.handle(frames, first),
                                 self.mdp.forget_all, self._bad, self._pair_told)
        self.mdp.mmi[MMI_BROKER] = self._describe

    # -- lifecycle ---------------------------------------------------------------------------

    def _open(self) -> None:
        r = self.router
        # Options before bind: set after it they do not apply to the listener.
        r.setsockopt(zmq.LINGER, 0)
        r.setsockopt(zmq.ROUTER_MANDATORY, 1)  # EHOSTUNREACH instead of silent drops
        r.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a reconnecting identity is not black-holed
        r.setsockopt(zmq.SNDHWM, HWM)
        r.setsockopt(zmq.RCVHWM, HWM)
        r.setsockopt(zmq.MAXMSGSIZE, self.settings.max_message_bytes + 64 * 1024)
        self.monitors = [SocketMonitor(r, "mdp"), SocketMonitor(self.bus.xsub, "bus_in")]
        # Every listener that asks ZAP is bound after its server (broker/zap.py).
        self.zap = ZapServer(self.ctx)
        self.zap.serve(tree_door.TREE_DOMAIN, tree_door.judge,
                       self._door_refused("tree", self.settings.tree_mdp_endpoint))
        _bind(r, self.settings.mdp_endpoint)
        # Options apply to the binds after them: the plain endpoint, then the tree's door
        # and the people's door (each a ZAP domain), then CURVE.
        tree_door.bind(r, self.settings.tree_mdp_endpoint)
        self.zap.serve(control_door.CONTROL_DOMAIN, control_door.judge,
                       self._door_refused("control", self.settings.control_mdp_endpoint))
        control_door.bind(r, self.settings.control_mdp_endpoint)
        if self.settings.curve:
            # No peer may take over another's connection by claiming its routing id (ours
            # never choose one: only a hand-made peer would, majordomo.py).
            r.setsockopt(zmq.ROUTER_HANDOVER, 0)
            self.curve = CurveListener(r, self.settings.keys_path,
                                       self.settings.curve_endpoint, self._publish_peer,
                                       self.settings.mdp_endpoint)
            self.zap.serve(ZAP_DOMAIN, self.curve.judge, self.curve.refused)
        _bind(self.bus.xsub, self.settings.bus_in_endpoint)
        _bind(self.bus.xpub, self.settings.bus_out_endpoint)
        if self.pair is not None:
            self.pair.open(_bind)

    def stop(self) -> None:
        """Ask the loop to exit (safe from a signal handler or another thread)."""
        self._stopping = True
        with contextlib.suppress(OSError):  # full buffer: a wake-up is already pending
            self._wake_w.send(b"\0")

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # No logging here: the signal may interrupt the loop inside a logger call.
        self._signal = signal.Signals(signum).name
        self.stop()

    def run(self) -> int:
        """Serve until stopped; 0 on a clean stop."""
        in_main = threading.current_thread() is threading.main_thread()
        if in_main:
            # The wake-up fd makes the poll return at once; the handler alone would run only
            # when Python retries the interrupted poll (PEP 475), after the rest of its timeout.
            old_fd = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
            old_term = signal.signal(signal.SIGTERM, self._on_signal)
            old_int = signal.signal(signal.SIGINT, self._on_signal)
        try:
            self._open()
            logger.info("broker: MDP/0.2 on {}, tree's door {}, people's door {}, bus in {}, "
                        "bus out {}", self.settings.mdp_endpoint,
                        self.settings.tree_mdp_endpoint, self.settings.control_mdp_endpoint,
                        self.settings.bus_in_endpoint, self.settings.bus_out_endpoint)
            self._loop()
            logger.info("broker: stopping ({})", self._signal or "stop()")
        finally:
            try:
                self._close()
            finally:
                if in_main:  # before the wake-up fd is closed: it must not outlive it
                    signal.set_wakeup_fd(old_fd)
                    signal.signal(signal.SIGTERM, old_term)
                    signal.signal(signal.SIGINT, old_int)
                self._wake_r.close()
                self._wake_w.close()
        logger.info("broker: stopped")
        return 0

    def _loop(self) -> None:
        # select.poll on the sockets' ZMQ_FDs rather than zmq_poll: zmq_poll checks ZMQ_EVENTS
        # of every socket on every pass (a syscall each here), which cost more than the MDP
        # work per message. ZMQ_FD only says "look at ZMQ_EVENTS": a handler drains its socket
        # until it reports no input, and a socket we sent on since may hold input the fd no
        # longer shows, so it is checked again on the next pass ("pending").
        handlers: dict[int, Callable[[], bool]] = {
            self.router.FD: self._drain_router,
            self.bus.xsub.FD: self.bus.forward_messages,
            self.bus.xpub.FD: self.bus.forward_subscriptions,
            self._wake_r.fileno(): self._drain_wake,
        }
        for mon in self.monitors:
            handlers[mon.socket.FD] = self._monitor_handler(mon)
        if self.zap is not None:
            handlers[self.zap.socket.FD] = self.zap.drain
        pair = self.pair
        if pair is not None:
            handlers[pair.sub.FD] = pair.drain_state
        poller = select.poll()
        for fd in handlers:
            poller.register(fd, select.POLLIN)
        router_fd, bus_fds = self.router.FD, (self.bus.xsub.FD, self.bus.xpub.FD)
        poll, monotonic, beat = poller.poll, time.monotonic, Beacon.from_env().beat
        mdp, bus = self.mdp, self.bus
        interval = self.settings.heartbeat_interval_s
        next_tick = monotonic() + interval
        next_summary = monotonic() + SUMMARY_EVERY_S
        pending: set[int] = set(handlers)
        while not self._stopping:
            if pending:
                wait_ms = 0
            else:  # the next heartbeat, and often enough for the supervisor's beacon
                wait_ms = max(0, int(min(next_tick - monotonic(), BEAT_INTERVAL_S) * 1000) + 1)
            ready = poll(wait_ms)
            mdp.now = now = monotonic()
            beat()
            todo, pending = pending, set()
            for fd, _ in ready:
                if handlers[fd]():
                    pending.add(fd)
            for fd in todo:
                if handlers[fd]():
                    pending.add(fd)
            if now >= next_tick:
                mdp.tick(now)
                if pair is not None:
                    pair.tick(now)
                pending.add(router_fd)  # it sent heartbeats
                next_tick += interval
                if next_tick <= now:  # fell behind (a long batch): no burst of catch-up ticks
                    next_tick = now + interval
                if now >= next_summary:
                    self._summary()
                    next_summary = now + SUMMARY_EVERY_S
            if bus.touched:
                bus.touched = False
                pending.update(bus_fds)
            if pair is not None and pair.touched:  # it sent on the ROUTER: look at it again
                pair.touched = False
                pending.add(router_fd)

    def _close(self) -> None:
        self.mdp.disconnect_all()
        for mon in self.monitors:  # disabled before any socket closes (it hung libzmq)
            mon.close()
        # A short linger only to get those DISCONNECTs out; nothing else is worth waiting for.
        self.router.setsockopt(zmq.LINGER, 200 if self.mdp.workers else 0)
        self.router.close()
        if self.pair is not None:
            self.pair.close()
        if self.zap is not None:
            self.zap.close()
        self.audit.close()
        self.bus.close()
        self.ctx.term()

    def _drain_wake(self) -> bool:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(512):
                pass
        return False

    def _publish_peer(self, topic: str, data: dict[str, Any]) -> None:
        self.bus.publish(topic, data, self._peer_limit, self.mdp.now)

    def _monitor_handler(self, mon: SocketMonitor) -> Callable[[], bool]:
        def drain() -> bool:
            events, more = mon.drain()
            for topic, data in events:
                self.bus.publish(topic, data, self._peer_limit, self.mdp.now)
            return more
        return drain

    # -- messages ----------------------------------------------------------------------------

    def _drain_router(self) -> bool:
        """Handle what the ROUTER holds, up to BATCH messages; True if it may hold more."""
        router, handle, waiting = self.router, self.mdp.handle, self._router_waiting
        if self.pair is not None:
            handle = self._pair_message
        for _ in range(BATCH):
            try:  # the first frame goes along: its metadata names the sender's door
                frames, first = recv_message(router)
            except zmq.Again:
                return False
            try:
                handle(frames, first)
            except Exception:
                # Input must never kill the broker: count, log (rate-limited), carry on.
                self.errors += 1
                if self._error_log_limit.allow(self.mdp.now):
                    logger.exception("broker: failed handling a message of {} frames",
                                     len(frames))
            # Cheaper than the zmq.Again that one recv too many would raise.
            if not zmq_poll(waiting, 0):
                return False
        return True

    def _pair_message(self, frames: list[bytes], first: zmq.Frame | None = None) -> None:
        assert self.pair is not None
        self.pair.message(frames, first, self.mdp.now)

    def _pair_told(self, note: Note, pair: Pair) -> None:
        """A change of state, a split brain or a bad pair: logged and published."""
        log_note(note, pair)
        self.bus.publish(BROKER_STATE, {"role": pair.role.value, "state": pair.state.value,
                                        "kind": note.kind, "text": note.text},
                         self._peer_limit, self.mdp.now)

    def _describe(self) -> bytes:
        """The ``mmi.broker`` reply: this broker's role and state (JSON), for a metrics
        collector or an operator; a broker alone is ``alone`` and ``active``."""
        if self.pair is None:
            return json.dumps({"role": "alone", "state": "active"}).encode()
        return self.pair.describe(self.mdp.now)

    def _bad(self, frames: list[bytes], reason: str) -> None:
        """Drop ``frames`` and report them on the bus (rate-limited, with a suppressed count)."""
        self.bad += 1
        self.bus.publish(BAD_MESSAGE, lambda: {
            "reason": reason,
            "peer": frames[0].hex(),
            "frames": len(frames) - 1,
            "head": [f[:32].hex() for f in frames[1:5]],
        }, self._bad_limit, self.mdp.now)

    def _worker_refused(self, peer: bytes, user_id: str, service: bytes, reason: str) -> None:
        """A peer tried to serve a service not its own (majordomo.py): logged, published
        and recorded in the audit trail (broker/refusal_audit.py)."""
        if self._error_log_limit.allow(self.mdp.now):
            logger.warning("broker: refused READY for {!r} from {}: {}",
                           service.decode("ascii", "replace"), peer.hex(), reason)
        data = {"peer": peer.hex(), "user_id": user_id,
                "door": ("control" if user_id.startswith(PERSON_PREFIX) else "curve")
                if user_id else "loopback",
                "service": service.decode("ascii", "replace"), "reason": reason}
        self.bus.publish(WORKER_REFUSED, dict(data), self._peer_limit, self.mdp.now)
        self.audit.record("worker_refused", data, self.mdp.now)

    def _door_refused(self, socket_name: str, endpoint: str
                      ) -> Callable[[list[bytes], Verdict], None]:
        """What to do of a connection refused at the tree's door (another user,
        broker/tree_door.py) or at the people's door (broker/control_door.py)."""
        def refused(request: list[bytes], verdict: Verdict) -> None:
            peer = request[3].decode("utf-8", "replace")
            if self._error_log_limit.allow(self.mdp.now):
                logger.warning("broker: refused a connection to the {} door from {}: {}",
                               socket_name, peer, verdict.text)
            data = {"socket": socket_name, "endpoint": endpoint, "peer": peer,
                    "key_prefix": "", "reason": verdict.text}
            self.bus.publish(PEER_REFUSED, dict(data), self._peer_limit, self.mdp.now)
            self.audit.record("peer_refused", data, self.mdp.now)
        return refused

    def _summary(self) -> None:
        """One line per window with what changed: a warning if input was rejected or peers
        misbehaved, debug if only ordinary things happened (a client left, a worker died)."""
        stats = {**self.mdp.stats, "bad_input": self.bad, "handler_errors": self.errors}
        changed = {k: v - self._reported.get(k, 0) for k, v in stats.items()
                   if v != self._reported.get(k, 0)}
        self._reported = stats
        if changed:
            level = "WARNING" if changed.keys() - BENIGN else "DEBUG"
            logger.log(level, "broker: last {}s: {}", SUMMARY_EVERY_S,
                       ", ".join(f"{k} +{v}" for k, v in sorted(changed.items())))


def _bind(sock: zmq.Socket[bytes], endpoint: str) -> None:
    delay = 0.05
    for attempt in range(BIND_ATTEMPTS):
        try:
            sock.bind(endpoint)
            return
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EADDRINUSE or attempt == BIND_ATTEMPTS - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)


def main() -> int:
    """``python -m broker``: settings from ``LEA_*`` (and ``LEA_CONFIG``); exit status."""
    settings = settings_or_exit()
    setup_logging("broker", settings.log_level)
    try:
        return Broker(settings).run()
    except (zmq.ZMQError, CurveConfigError, TreeDoorError, PairConfigError) as exc:
        logger.error("broker: cannot start: {}", exc)
        return 1
