"""A light bench agent: the protocol of agent/process.py without an executor or a ledger.

Like the real agent it is an MDP worker of ``agent.<machine_id>`` (broker.worker.Worker),
answers each :class:`DispatchAction` with :class:`ActionReceived`, sends an
:class:`AgentHello` at start and after each reconnection, and sends each
:class:`ActionReport` as a request to ``dispatcher``, re-sent on the agent's own backoff
(agent.reports.Retrying) until a :class:`ReportAck` comes. A re-delivered action it has
already reported is answered with the original report re-addressed (``already_executed``),
as the real agent's ledger does. Actions themselves are no-ops (or a fixed delay), so what
is measured is the orchestrator, not a desktop.

Many bench agents share one process and one poll loop (:class:`Host`); ``python
bench/bench_agent.py agents ...`` runs such a host as a child of the throughput bench.
"""

from __future__ import annotations

import argparse
import heapq
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
from benchkit import ECHO, dispatch_sized_body, quiet_logs

from agent.reports import Retrying, readdress
from broker import mdp
from broker.client import Client
from broker.worker import Request, Worker
from messages.base import Message
from messages.codec import MessageError, decode, encode, new_id
from messages.control import ErrorReply, Ping, Pong
from messages.dispatch import (
    ActionReceived,
    ActionReport,
    AgentHello,
    DispatchAction,
    ReportAck,
)

DISPATCHER = "dispatcher"
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
        self.on_dispatch = on_dispatch
        self.instance_id = uuid.uuid4().hex
        self.done: dict[tuple[str, str], ActionReport] = {}  # the ledger's role, in memory
        self.report_sent_at: float | None = None
        self.overheads: list[float] = []  # report sent -> next dispatch received (seconds)
        self.reported_at: list[float] = []  # monotonic time of each first report
        self.accepted = 0
        self.generation = 0
        self._connect()

    def _connect(self) -> None:
        self.worker = Worker(self.ctx, self.endpoint, self.service, self.heartbeat_s)
        self.client = Client(self.ctx, self.endpoint)
        self.outbox = Retrying(self.client)
        self.generation += 1
        self.outbox.send("hello", DISPATCHER, AgentHello(
            machine_id=self.machine_id, instance_id=self.instance_id, pid=0), new_id(),
            lambda _body: True)

    def crash_and_reconnect(self) -> float:
        """Drop both connections as a killed process would (no DISCONNECT), forget what was
        not reported, connect again and say hello; returns the monotonic time of it."""
        self.worker.socket.close(0)
        self.client.close()
        self.report_sent_at = None
        at = time.monotonic()
        self._connect()
        return at

    @property
    def sockets(self) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
        return self.worker.socket, self.client.socket

    @property
    def settled(self) -> bool:
        """Every report acknowledged and the hello answered."""
        return len(self.outbox) == 0

    # Requests -------------------------------------------------------------------------------

    def serve(self, request: Request, now: float) -> DispatchAction | None:
        """Reply to one request; returns the dispatch to execute, if any."""
        try:
            envelope = decode(request.body[0])
        except (MessageError, IndexError) as exc:
            self.worker.reply(request, encode(ErrorReply(code="bad_message", message=str(exc))))
            return None
        body = envelope.body
        reply: Message
        if isinstance(body, Ping):
            reply = Pong(service=self.service, pid=0, started_at=0.0)
        elif not isinstance(body, DispatchAction):
            reply = ErrorReply(code="unsupported_type", message=envelope.type)
        else:
            reply = ActionReceived(action_id=body.action.action_id, attempt_id=body.attempt_id)
        self.worker.reply(request, encode(reply, envelope.id))
        if not isinstance(body, DispatchAction):
            return None
        if self.report_sent_at is not None:
            self.overheads.append(now - self.report_sent_at)
            self.report_sent_at = None
        if self.on_dispatch is not None and not self.on_dispatch(self, body, now):
            return None
        previous = self.done.get((body.replay_id, body.action.action_id))
        if previous is not None:  # executed already: never twice, answer with its report
            if previous.attempt_id != body.attempt_id:
                self.report(readdress(previous, body), first=False)
            return None
        return body

    def execute(self, dispatch: DispatchAction) -> None:
        """The no-op action is done: report it (what agent.reports.build_report makes of a
        success, without its dataclass round trip)."""
        report = ActionReport(
            replay_id=dispatch.replay_id, session_id=dispatch.session_id,
            machine_id=dispatch.machine_id, action_id=dispatch.action.action_id,
            attempt_id=dispatch.attempt_id, success=True, executed_at=time.time())
        self.done[(dispatch.replay_id, dispatch.action.action_id)] = report
        self.report(report, first=True)

    def report(self, report: ActionReport, first: bool) -> None:
        def on_reply(body: Message) -> bool:
            if isinstance(body, ReportAck) and body.attempt_id == report.attempt_id:
                self.accepted += body.status == "accepted"
                return True
            return False

        now = time.monotonic()
        self.report_sent_at = now
        if first:
            self.reported_at.append(now)
        self.outbox.send(f"report:{report.replay_id}:{report.action_id}", DISPATCHER, report,
                         new_id(), on_reply)

    def tick(self, now: float) -> None:
        self.worker.tick(now)
        self.client.tick(now)
        self.outbox.tick(now)


class Host:
    """One poll loop for many bench agents."""

    TICK_S = 0.05

    def __init__(self, agents: list[BenchAgent],
                 check: Callable[[], None] | None = None) -> None:
        self.agents = agents
        self.check = check  # called twice a second while serving: raises to give up
        self._timers: list[tuple[float, int, BenchAgent, DispatchAction]] = []
        self._seq = 0
        self._poller = zmq.Poller()
        self._owners: dict[zmq.Socket[bytes], tuple[BenchAgent, bool]] = {}
        self._generations: list[int] = []
        self._next_tick = 0.0

    def _refresh(self) -> None:
        generations = [a.generation for a in self.agents]
        if generations == self._generations:
            return
        self._generations = generations
        self._poller = zmq.Poller()
        self._owners = {}
        for agent in self.agents:
            worker, client = agent.sockets
            self._owners[worker] = (agent, True)
            self._owners[client] = (agent, False)
            self._poller.register(worker, zmq.POLLIN)
            self._poller.register(client, zmq.POLLIN)

    def step(self, max_wait_s: float = 0.05) -> None:
        """One poll and everything it made ready: requests, replies, timers."""
        self._refresh()
        now = time.monotonic()
        wait = min(max_wait_s, max(0.0, self._next_tick - now))
        if self._timers:
            wait = min(wait, max(0.0, self._timers[0][0] - now))
        ready = self._poller.poll(int(wait * 1000) + (1 if wait > 0 else 0))
        now = time.monotonic()
        for sock, _ in ready:
            agent, is_worker = self._owners[sock]
            if is_worker:
                for request in agent.worker.drain():
                    dispatch = agent.serve(request, now)
                    if dispatch is None:
                        continue
                    if agent.action_s > 0:  # +-50%: agents in step would report in bursts
                        self._seq += 1
                        due = now + agent.action_s * random.uniform(0.5, 1.5)
                        heapq.heappush(self._timers, (due, self._seq, agent, dispatch))
                    else:
                        agent.execute(dispatch)
            else:
                agent.client.drain()
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _due, _seq, agent, dispatch = heapq.heappop(self._timers)
            agent.execute(dispatch)
        if now >= self._next_tick:
            self._next_tick = now + self.TICK_S
            for agent in self.agents:
                agent.tick(now)

    def run_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Serve until ``done()``; False after ``timeout_s``. ``self.check`` may raise."""
        deadline = time.monotonic() + timeout_s
        next_check = 0.0
        while not done():
            now = time.monotonic()
            if now > deadline:
                return False
            if self.check is not None and now >= next_check:
                self.check()
                next_check = now + 0.5
            self.step()
        return True

    def close(self) -> None:
        for agent in self.agents:
            agent.worker.close()
            agent.client.close()


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
