"""The agent's side of CURVE (docs/protocol.md): keys on every socket, and a watch on handshakes.

A broker that refuses our key answers the handshake with ZAP 400; libzmq then never retries
that connection and queues what we send in silence (docs/protocol.md, "libzmq behaviours"). The only
sign is a socket-monitor event, so every socket the agent opens is monitored: a refusal is logged as
a clear error naming the key and what to do, and the sockets are made anew after a backoff
(or the agent exits with EXIT_REFUSED when told to). A wrong server key shows differently:
the broker drops the handshake without a word and libzmq retries it for ever, so repeated
failures without detail are reported the same way.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from loguru import logger
from zmq.utils.monitor import recv_monitor_message

from transport.curve_keys import key_prefix, read_key_file

EXIT_REFUSED = 3
"""The agent's exit status when the broker refused its handshake (--exit-on-auth-failure)."""

BACKOFF_S: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)
"""Wait before making the sockets anew after each refusal; the last one repeats."""

TOLERATED_FAILURES = 3
"""Handshakes failed without detail (libzmq retries those itself) before we call it trouble."""

OK, REFUSED, MISMATCH, FAILED = "ok", "refused", "mismatch", "failed"
RETRY, EXIT = "retry", "exit"

_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
           | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
           | zmq.EVENT_MONITOR_STOPPED)
_monitor_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """Z85 keys: the broker's public key, and this agent's key pair."""

    server_public: bytes
    public: bytes
    secret: bytes

    @classmethod
    def load(cls, server_key: Path, agent_key: Path) -> CurveKeys:
        """From certificate files; raises CurveConfigError naming the file at fault."""
        server_public, _ = read_key_file(server_key)
        public, secret = read_key_file(agent_key, secret=True)
        assert secret is not None
        return cls(server_public, public, secret)


@dataclass(frozen=True, slots=True)
class Trouble:
    """Something to tell the operator: a new refusal (``retry_in_s`` None: we exit), or
    ``kind`` OK after ``attempt`` refusals (accepted at last)."""

    kind: str
    attempt: int
    retry_in_s: float | None


class HandshakeWatch:
    """Pure: handshake outcomes and the clock in, what to report and when to retry out.

    One refusal round is reported once, however many sockets were refused in it.
    """

    def __init__(self, backoff: tuple[float, ...] = BACKOFF_S, exit_on_failure: bool = False,
                 tolerated_failures: int = TOLERATED_FAILURES) -> None:
        self.backoff = backoff
        self.exit_on_failure = exit_on_failure
        self.tolerated_failures = tolerated_failures
        self.attempts = 0  # refusal rounds since the last successful handshake
        self.failures = 0  # handshakes failed without detail since then
        self.retry_at: float | None = None
        self.exiting = False
        self.round_kind = ""  # what the round pending a retry was reported as

    def outcome(self, kind: str, now: float) -> Trouble | None:
        """Record one handshake outcome (OK, REFUSED, MISMATCH, FAILED).

        OK leaves a pending retry alone: another socket of the same round may still be
        refused, and only a retry makes it anew (the owner skips a retry nobody needs).
        """
        if kind == OK:
            attempts, self.attempts, self.failures = self.attempts, 0, 0
            return Trouble(OK, attempts, 0.0) if attempts else None
        if kind == FAILED:
            self.failures += 1
            if self.failures < self.tolerated_failures:
                return None
        if self.retry_at is not None or self.exiting:
            if self.round_kind == FAILED and kind != FAILED:
                # The same round seen more precisely (a socket that failed without detail
                # and one refused, say): say what it really is.
                self.round_kind = kind
                retry_in = None if self.exiting else max(0.0, (self.retry_at or now) - now)
                return Trouble(kind, self.attempts, retry_in)
            return None  # this round is already reported
        self.attempts += 1
        self.failures = 0
        self.round_kind = kind
        if self.exit_on_failure:
            self.exiting = True
            return Trouble(kind, self.attempts, None)
        delay = self.backoff[min(self.attempts - 1, len(self.backoff) - 1)]
        self.retry_at = now + delay
        return Trouble(kind, self.attempts, delay)

    def due(self, now: float) -> str | None:
        """EXIT, RETRY (make the sockets anew now), or None."""
        if self.exiting:
            return EXIT
        if self.retry_at is not None and now >= self.retry_at:
            self.retry_at = None
            return RETRY
        return None


def _kind(event: int, value: int) -> str | None:
    if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
        return OK
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return REFUSED
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        mismatch = value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
        return MISMATCH if mismatch else FAILED
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return FAILED
    return None


class CurveLink:
    """Puts the keys on each socket (:meth:`setup`, a broker SocketSetup) and watches them.

    The owner calls :meth:`tick` often (the agent's loop does, at least every 0.25 s): it
    returns RETRY when the sockets must be made anew (one of them was refused), EXIT when the
    agent must stop.
    :meth:`close` before the context terminates.
    """

    def __init__(self, keys: CurveKeys, endpoint: str, agent_key: Path,
                 exit_on_failure: bool = False) -> None:
        self.keys = keys
        self.endpoint = endpoint
        self.agent_key = agent_key
        self.watch = HandshakeWatch(exit_on_failure=exit_on_failure)
        self._monitors: list[tuple[zmq.Socket[Any], zmq.Socket[Any]]] = []
        # Sockets whose handshake was refused: libzmq will not try them again.
        self._dead: list[zmq.Socket[Any]] = []

    def setup(self, sock: zmq.Socket[Any]) -> None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.keys.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.keys.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.keys.secret)
        # A unique address: pyzmq's default is derived from the fd, which a closed socket
        # whose monitor is still draining may share with a new one.
        monitor = sock.get_monitor_socket(_EVENTS, f"inproc://lea-curve-{next(_monitor_ids)}")
        monitor.setsockopt(zmq.LINGER, 0)
        self._monitors.append((sock, monitor))

    def tick(self, now: float | None = None) -> str | None:
        now = time.monotonic() if now is None else now
        for target, monitor in list(self._monitors):
            while True:
                try:
                    event = recv_monitor_message(monitor, zmq.NOBLOCK)
                except zmq.Again:
                    break
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    # Only now may the monitor close: closing it while libzmq still
                    # reports to it hung the context's I/O thread (docs/protocol.md).
                    monitor.close(0)
                    self._monitors.remove((target, monitor))
                    break
                kind = _kind(event["event"], int(event["value"]))
                if kind in (REFUSED, MISMATCH) and target not in self._dead:
                    self._dead.append(target)
                if kind is not None:
                    self._report(self.watch.outcome(kind, now))
        self._dead = [sock for sock in self._dead if not sock.closed]
        due = self.watch.due(now)
        return None if due == RETRY and not self._dead else due

    def _report(self, trouble: Trouble | None) -> None:
        if trouble is None:
            return
        prefix = key_prefix(self.keys.public)
        if trouble.kind == OK:
            logger.info("the broker at {} accepted this agent's key {}... (after {} refusal(s))",
                        self.endpoint, prefix, trouble.attempt)
            return
        what = {
            REFUSED: (f"the broker at {self.endpoint} REFUSED this agent's CURVE key "
                      f"{prefix}...: it is not in the broker's allow-list. Copy the public key "
                      f"(the .key file beside {self.agent_key}) into the allowed/ directory of "
                      "the broker's keys"),
            MISMATCH: (f"{self.endpoint} does not speak CURVE (mechanism mismatch): connect to "
                       "the broker's curve_endpoint, or run without --curve"),
            FAILED: (f"the CURVE handshake with {self.endpoint} keeps failing: is --server-key "
                     "the broker's server.key?"),
        }[trouble.kind]
        then = ("exiting (--exit-on-auth-failure)" if trouble.retry_in_s is None
                else f"retrying in {trouble.retry_in_s:g} s (attempt {trouble.attempt})")
        logger.error("{}; {}", what, then)

    def close(self) -> None:
        """Stop every monitor, then close it (in that order: see :meth:`tick`)."""
        for target, monitor in self._monitors:
            if not target.closed:
                target.disable_monitor()
            else:  # libzmq stops it when it destroys the socket: wait for that, briefly
                deadline = time.monotonic() + 0.5
                while monitor.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                    if recv_monitor_message(monitor)["event"] == zmq.EVENT_MONITOR_STOPPED:
                        break
            monitor.close(0)
        self._monitors.clear()
