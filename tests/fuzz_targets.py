"""The request handlers the fuzz tests drive in-process: each actor, and the agent.

A :class:`Target` is built as its process builds it (real SQLite stores under a temporary
directory, real ZeroMQ sockets connected to endpoints nobody serves: what they send waits in
their queues), and is handed requests as its worker would hand them: ``serve(Request)``.
A deferred answer (loop_detector, safety_checks) is waited for. :meth:`Target.settle` runs
what the loop would run between requests: the client's timeouts (on a fast clock, so that a
call nobody answers fails at once, as it would after its timeout) and, for the agent, the
executions it finished.

This reaches into a few private attributes of :class:`~actors.base.Actor` and
:class:`~agent.process.Agent` (the loop state that ``run()`` owns): a test harness may.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from actors import actor_class
from actors.base import Actor
from agent.executors.simulated import SimulatedExecutor
from agent.process import Agent
from agent.protocol.ledger import Ledger
from agent.windows.pause_notice import PauseNotices
from messages.base import Message
from messages.codec import decode, encode
from messages.control import Ping
from messages.dispatch import DispatchAction
from messages.pause import AgentPaused, AgentPauseEnded
from messages.safety_checks import CaptureScreen
from runtime.settings import Settings
from transport.client import Client
from transport.worker import Request

DEFERRED_TIMEOUT_S = 30.0
"""A deferred answer later than this is a hang (the LLM timeout in the fuzz env is 1 s)."""
AGENT_MACHINE = "m1"
AGENT_TAKES: frozenset[type[Message]] = frozenset(
    {DispatchAction, AgentPaused, AgentPauseEnded, CaptureScreen, Ping})

ACTOR_NAMES = ("dispatcher", "watchdog", "loop_detector", "safety_checks", "monitor_router",
               "audit_log")
TARGETS = (*ACTOR_NAMES, "agent")

FUZZ_ENV = {
    # A model server that refuses at once: the LLM path fails fast, every time.
    "RPA_SAFETY_CHECKS_LLM_TIMEOUT_S": "1",
    "RPA_LOOP_DETECTOR_ENABLED": "1",
    "RPA_LOOP_EMBEDDER": "pixel",  # no CLIP checkpoint here
}


@dataclass(frozen=True, slots=True)
class Served:
    """What a target answered: the reply, its envelope id, and a handler failure if any."""

    reply: Message
    reply_id: str
    failure: str | None = None


class Target:
    """One handler under fuzz; ``handled`` are the types it serves, ``agent_requests`` what
    an authenticated agent may send it."""

    name: str
    handled: frozenset[type[Message]]
    agent_requests: Mapping[type[Message], Any]

    def serve(self, request: Request) -> Served:
        raise NotImplementedError

    def settle(self) -> None:
        """Between two requests."""

    def close(self) -> None:
        raise NotImplementedError


def _served(raw: bytes) -> Served:
    envelope = decode(raw, limit=len(raw) + 1)
    return Served(envelope.body, envelope.id)


class ActorTarget(Target):
    """An actor as ``python -m actors NAME`` builds it."""

    def __init__(self, name: str, settings: Settings) -> None:
        self.name = name
        self.actor: Actor = actor_class(name)(settings)
        self.handled = frozenset(self.actor._handlers)
        self.agent_requests = self.actor.agent_requests
        self.clock = time.monotonic()
        self.actor.on_start()

    def serve(self, request: Request) -> Served:
        actor = self.actor
        actor._held = False  # as run() does before each request
        raw = actor.serve(request)
        if not actor._held:
            return _served(raw)
        try:
            done = actor.deferred.wait(DEFERRED_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"{self.name}: no deferred answer within "
                                 f"{DEFERRED_TIMEOUT_S} s (a hang)") from None
        if done.failure is None and done.then is not None:
            done.then(done.reply)
        encode(done.reply, done.req.id)  # what _deliver_deferred sends: it must encode
        return Served(done.reply, done.req.id, done.failure)

    def settle(self) -> None:
        # Calls nobody answers time out now (a fast clock), and their callbacks run.
        self.clock += 60.0
        self.actor.client.tick(self.clock)

    def close(self) -> None:
        self.actor.on_stop()
        self.actor.close()


class AgentTarget(Target):
    """The agent's request handler, with a ledger, a simulated executor and its thread."""

    def __init__(self, settings: Settings, data_dir: Path) -> None:
        self.name = "agent"
        executor = SimulatedExecutor(sleep=lambda _s: None, exit=_no_exit)
        self.agent = agent = Agent(settings, AGENT_MACHINE, executor, data_dir=data_dir)
        self.handled = AGENT_TAKES  # not an Actor: its _dispatch names what it takes
        self.agent_requests = {Ping: None}
        agent.ctx = zmq.Context()
        agent._wire(Ledger(data_dir / "ledger.sqlite3"), Client(agent.ctx, settings.mdp_endpoint))
        agent.pauses = PauseNotices(executor.name, mode="off")
        self.clock = time.monotonic()
        self._thread = threading.Thread(target=agent._execution_loop, daemon=True)
        self._thread.start()

    def serve(self, request: Request) -> Served:
        return _served(self.agent._serve(request))

    def settle(self) -> None:
        self.agent._collect_done()
        self.agent._send_progress()
        self.clock += 60.0
        self.agent.client.tick(self.clock)
        self.agent.outbox.tick(self.clock)

    def close(self) -> None:
        self.agent._jobs.put(None)
        self._thread.join(timeout=10)
        self.agent.pauses.close()
        self.agent.client.close()
        self.agent.ctx.term()
        self.agent.ledger.close()


def _no_exit(code: int) -> None:
    raise AssertionError(f"the simulated executor asked to exit ({code})")


def build(name: str, settings: Settings, tmp: Path) -> Target:
    if name == "agent":
        data_dir = tmp / "agent"
        data_dir.mkdir(parents=True, exist_ok=True)
        return AgentTarget(settings, data_dir)
    return ActorTarget(name, settings)
