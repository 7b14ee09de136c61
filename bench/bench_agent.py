"""A light bench agent: the protocol of agent/process.py without an executor or a ledger.

Like the real agent it is an MDP worker of ``agent.<machine_id>`` (transport.worker.Worker),
answers each :class:`DispatchAction` with :class:`ActionReceived` and sends an
:class:`AgentHello` at start and after each reconnection. Before running an attempt of an
input action (messages.workflow.INPUT_TYPES) it claims it from ``dispatcher``
(:class:`ClaimAttempt`) and runs it only once a ``ClaimReply(granted=True)`` comes; "not
yet" (``retry_in_s``) is asked again that much later, twice as late each time up to 0.5 s,
and a refusal means the attempt neither runs nor is reported (agent/protocol/asks.py
``Asks.claim``).
Each :class:`ActionReport` is a request to ``dispatcher``, re-sent on the agent's backoff
(agent/protocol/outbox.py) until a :class:`ReportAck` comes. A re-delivered action it has already
reported is answered with the original report re-addressed (``already_executed``), as the
real agent's ledger does. Actions are no-ops (or a fixed delay): what is measured is the
orchestrator, not a desktop.

Bench agents share the tree's cores, so a step costs them little: messages are built and
read without pydantic (bench/bench_wire.py, checked byte for byte against the codec at
start), and many agents share one process and one epoll loop (bench/bench_host.py ``Host``).
``python bench/bench_agent.py agents ...`` runs such a host as a child of the throughput
bench.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zmq
from bench_host import FastWorker, Host, Requests
from bench_wire import (
    Dispatch,
    claim,
    envelope,
    hello,
    read,
    read_dispatch,
    readdress,
    received,
    report_body,
)
from benchkit import ECHO, dispatch_sized_body, quiet_logs

from messages.base import Message
from messages.codec import MessageError, decode, encode, new_id
from messages.control import ErrorReply, Ping, Pong
from messages.dispatch import DispatchAction
from transport import mdp
from transport.worker import Request

__all__ = ["BenchAgent", "Host", "main"]

CLAIM_WAIT_MAX_S = 0.5  # agent/process.py: the longest wait between two "not yet" claims
OnDispatch = Callable[["BenchAgent", DispatchAction, float], bool]
"""Called for every dispatch (agent, dispatch, received at); False: do not execute it."""


class BenchAgent:
    """One simulated workstation; its timings are in ``overheads`` and ``reported_at``."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, machine_id: str,
                 heartbeat_s: float = 1.0, action_s: float = 0.0,
                 on_dispatch: OnDispatch | None = None) -> None:
        self.ctx, self.endpoint, self.machine_id = ctx, endpoint, machine_id
        self.service = f"agent.{machine_id}"
        self.heartbeat_s = heartbeat_s
        self.action_s = action_s
        self.on_dispatch = on_dispatch  # gets the validated DispatchAction (slower)
        self.instance_id = uuid.uuid4().hex
        self.done: dict[tuple[str, str], dict[str, Any]] = {}  # reports: the ledger's role
        self.report_sent_at: float | None = None
        # Report sent -> the next action may start: its dispatch came (an action without
        # input), or its claim was granted (an input action).
        self.overheads: list[float] = []
        self.reported_at: list[float] = []  # monotonic time of each first report
        self.accepted = 0
        self.refused = 0  # claims refused: attempts neither run nor reported
        self.not_yet = 0  # claims answered "not yet" (a loop verdict pending), asked again
        self.generation = 0
        self.wiring = 0  # +1 each time a socket is replaced (the Host then waits on the new)
        self.host: Host | None = None  # set by the Host: timers (claims "not yet", delays)
        self._connect()

    def _connect(self) -> None:
        self.worker = FastWorker(self.ctx, self.endpoint, self.service, self.heartbeat_s)
        self.requests = Requests(self.ctx, self.endpoint)
        self._hello_for = 0  # the worker connection our last hello announced
        self.generation += 1
        self.wiring += 1
        self._check_hello(time.monotonic())

    def crash_and_reconnect(self) -> float:
        """Drop both connections as a killed process would (no DISCONNECT), forget what was
        not reported, connect again and say hello; returns the monotonic time of it."""
        self.worker.socket.close(0)
        self.requests.close()
        self.report_sent_at = None
        at = time.monotonic()
        self._connect()
        if self.host is not None:
            self.host.watch(self)
        return at

    @property
    def sockets(self) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
        return self.worker.socket, self.requests.socket

    @property
    def settled(self) -> bool:
        """Every report acknowledged, no claim pending and the hello answered."""
        return len(self.requests) == 0

    def _check_hello(self, now: float) -> bool:
        """At start and after each reconnection of the worker (a new connection)."""
        if self.worker.connections == self._hello_for:
            return False
        if self._hello_for:
            self.wiring += 1  # the worker reconnected: on a new socket
        self._hello_for = self.worker.connections
        msg_id = new_id()
        self.requests.send("hello", msg_id, hello(self.machine_id, self.instance_id, msg_id),
                           lambda *_: True, now)
        return True

    # Requests -------------------------------------------------------------------------------

    def serve(self, now: float) -> bool:
        """Handle whatever waits on both sockets; True if we sent anything meanwhile."""
        fired = self.requests.fired
        self.requests.drain(now)
        replied = False
        for request in self.worker.drain():
            self._serve(request, now)
            replied = True  # each request is answered on the worker socket
        replied = self._check_hello(now) or replied
        return replied or self.requests.fired != fired

    def _serve(self, request: Request, now: float) -> None:
        """Answer one request; go on with the dispatch it brings, if any."""
        got = read(request.body[0]) if len(request.body) == 1 else None
        d = read_dispatch(got[1], got[2]) if got is not None and (
            got[0] == "action.dispatch") else None
        full: DispatchAction | None = None
        if d is None or self.on_dispatch is not None:
            validated = self._decode(request)  # what it is not, it answers
            if validated is None:
                return
            d, full = Dispatch.of(validated[0], validated[1]), validated[1]
        self.worker.reply(request, received(d))
        if not d.is_input:
            self._may_start(now)
        if self.on_dispatch is not None and full is not None and not self.on_dispatch(
                self, full, now):
            return
        previous = self.done.get((d.replay_id, d.action_id))
        if previous is not None:  # executed already: never twice, answer with its report
            if previous["attempt_id"] != d.attempt_id:
                self._report(readdress(previous, d), first=False)
        elif d.is_input:
            self._claim(d, 0.0, now)
        else:
            self._run(d, now)

    def _decode(self, request: Request) -> tuple[str, DispatchAction] | None:
        """The slow path: the codec's validation; answers anything but a dispatch."""
        try:
            envelope = decode(request.body[0])
        except (MessageError, IndexError) as exc:
            self.worker.reply(request, encode(ErrorReply(code="bad_message", message=str(exc))))
            return None
        body = envelope.body
        if isinstance(body, DispatchAction):
            return envelope.id, body
        reply: Message
        if isinstance(body, Ping):
            reply = Pong(service=self.service, pid=0, started_at=0.0)
        else:
            reply = ErrorReply(code="unsupported_type", message=envelope.type)
        self.worker.reply(request, encode(reply, envelope.id))
        return None

    def _may_start(self, now: float) -> None:
        """The next action may start now: the end of the per-step overhead."""
        if self.report_sent_at is not None:
            self.overheads.append(now - self.report_sent_at)
            self.report_sent_at = None

    def _claim(self, d: Dispatch, wait_s: float, now: float) -> None:
        """Claim ``d`` in ``wait_s``; again, twice as late each time, while "not yet"."""
        def on_reply(kind: str, body: dict[str, Any], at: float) -> bool:
            if kind == "action.claim_reply":
                retry = body.get("retry_in_s")
                if body.get("granted") is True:
                    self._may_start(at)
                    self._run(d, at)
                elif retry:
                    self.not_yet += 1
                    self._claim(d, min(CLAIM_WAIT_MAX_S, max(retry, 2 * wait_s)), at)
                else:
                    self.refused += 1  # not current any more: never run, never reported
            elif kind == "error" and body.get("code") == "unsupported_type":
                self._may_start(at)  # a dispatcher older than claims: it never refuses
                self._run(d, at)
            else:
                return False
            return True

        msg_id = new_id()
        # Keyed by attempt: the claim of the next attempt may be sent from this one's answer.
        self.requests.send(f"claim:{d.attempt_id}", msg_id, claim(d, self.machine_id, msg_id),
                           on_reply, now, wait_s)
        if wait_s > 0:  # (self.requests read then: a reconnection replaces it)
            self._host().at(now + wait_s, self, lambda at: self.requests.tick(at))

    def _run(self, d: Dispatch, now: float) -> None:
        if self.action_s > 0:  # +-50%: agents in step would report in bursts
            self._host().at(now + self.action_s * random.uniform(0.5, 1.5), self,
                            lambda _now: self._execute(d))
        else:
            self._execute(d)

    def _host(self) -> Host:
        if self.host is None:
            raise RuntimeError("a bench agent waits only within a Host")
        return self.host

    def _execute(self, d: Dispatch) -> None:
        """The no-op action is done: report it."""
        body = report_body(d, time.time())
        self.done[(d.replay_id, d.action_id)] = body
        self._report(body, first=True)

    def _report(self, body: dict[str, Any], first: bool) -> None:
        action_id, attempt_id = body["action_id"], body["attempt_id"]

        def on_reply(kind: str, ack: dict[str, Any], _at: float) -> bool:
            if kind == "action.report_ack" and (ack.get("action_id"), ack.get(
                    "attempt_id")) == (action_id, attempt_id):
                self.accepted += ack.get("status") == "accepted"
                return True
            return False

        msg_id = new_id()
        data = envelope("action.report", msg_id, body)
        now = time.monotonic()
        self.report_sent_at = now
        if first:
            self.reported_at.append(now)
        self.requests.send(f"report:{body['replay_id']}:{action_id}", msg_id, data, on_reply,
                           now)

    def close(self) -> None:
        self.worker.close()
        self.requests.close()

    def tick(self, now: float) -> bool:
        """Heartbeats, re-sends, a hello after a reconnection; True if it sent anything."""
        worker = self.worker
        before = worker.sent_at, worker.connections
        worker.tick(now)
        sent = self.requests.tick(now)
        return self._check_hello(now) or sent or (worker.sent_at, worker.connections) != before


# Child processes of the throughput bench ---------------------------------------------------

def _agents_main(args: argparse.Namespace) -> int:
    """Host ``count`` agents until each has reported ``steps`` actions and been acked."""
    quiet_logs()
    ctx: zmq.Context[Any] = zmq.Context()
    agents = [BenchAgent(ctx, args.endpoint, f"{args.prefix}-{i}", args.heartbeat_s,
                         args.action_ms / 1000) for i in range(args.count)]
    host = Host(agents)
    if not host.run_until(lambda: all(a.settled for a in agents), timeout_s=30):
        print("hello not answered", file=sys.stderr)
        return 1
    print("ready", flush=True)
    cpu_start = time.process_time()
    ok = host.run_until(
        lambda: all(len(a.reported_at) >= args.steps and a.settled for a in agents),
        timeout_s=args.timeout)
    result = {"ok": ok, "overheads": [o for a in agents for o in a.overheads],
              "reported_at": [t for a in agents for t in a.reported_at],
              "accepted": sum(a.accepted for a in agents),
              "cpu_s": time.process_time() - cpu_start}
    Path(args.out).write_text(json.dumps(result))
    host.close()
    ctx.term()
    return 0 if ok else 1


def _echo_clients_main(args: argparse.Namespace) -> int:
    """``count`` clients, each with one echo request in flight, ``steps`` requests each."""
    ctx: zmq.Context[Any] = zmq.Context()
    socks = []
    for _ in range(args.count):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(args.endpoint)
        socks.append(sock)
    print("ready", flush=True)
    sys.stdin.readline()  # "go": every child starts at once
    cpu_start = time.process_time()
    request = mdp.client_request(ECHO.encode(), dispatch_sized_body())
    poller = zmq.Poller()
    left = {sock: args.steps for sock in socks}
    sent_at: dict[zmq.Socket[bytes], float] = {}
    latencies: list[float] = []
    done_at: list[float] = []
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
        sent_at[sock] = time.monotonic()
        sock.send_multipart(request)
    deadline = time.monotonic() + args.timeout
    while any(left.values()) and time.monotonic() < deadline:
        for sock, _ in poller.poll(100):
            sock.recv_multipart()
            now = time.monotonic()
            latencies.append(now - sent_at[sock])
            done_at.append(now)
            left[sock] -= 1
            if left[sock]:
                sent_at[sock] = now
                sock.send_multipart(request)
    ok = not any(left.values())
    Path(args.out).write_text(json.dumps({"ok": ok, "overheads": latencies,
                                          "reported_at": done_at,
                                          "cpu_s": time.process_time() - cpu_start}))
    for sock in socks:
        sock.close(0)
    ctx.term()
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="a child process of bench/throughput.py")
    parser.add_argument("mode", choices=["agents", "echo-clients"])
    parser.add_argument("endpoint")
    parser.add_argument("--prefix", default="bench")
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--action-ms", type=float, default=0.0, help="mean, +-50%%")
    parser.add_argument("--heartbeat-s", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.mode == "agents":
        return _agents_main(args)
    return _echo_clients_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
