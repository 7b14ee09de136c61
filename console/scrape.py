"""``GET /metrics``: the tree's Prometheus metrics (console/metrics.py), on the console's own
server and behind its rules (console/access.py): a scraper presents the console's token
(``Authorization: Bearer``, ``LEA_CONSOLE_TOKEN``) as any script does; a signed-in person may
look too. The page is the text exposition format of ``prometheus_client``.

:func:`poll` is the edge that asks, every :data:`POLL_S`: each broker what it is (MMI
``mmi.broker``, answered in every state of a pair and never taken for a peer failing over),
monitor_router for the agents' last heartbeats, the broker whether each known agent serves
its ``agent.M`` service (``mmi.service``), and the console's own audit outbox for its
backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from typing import Annotated, Any

import zmq
from fastapi import APIRouter, Depends, Response
from loguru import logger
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from console.auth import state_of, who
from console.metrics import BrokerSeen, broker_seen
from console.state import ConsoleState
from messages.monitor import MonitorStatus, MonitorStatusReply
from messages.queue import ListQueues, QueueReply
from runtime.settings import Settings
from transport.client import CallFailed, SyncClient

POLL_S = 5.0
"""How often the brokers, the agents and the console's backlog are looked at (a scrape
reads the last)."""
BROKER_TIMEOUT_S = 1.0


def broker_endpoints(settings: Settings) -> tuple[str, ...]:
    """The brokers to ask what they are: the one the console uses, and the backup of a pair
    (``LEA_MDP_BACKUP_ENDPOINT``)."""
    return settings.mdp_endpoints


class Brokers:
    """One blocking client per broker, asked in turn from a worker thread. The lock keeps
    one thread at a time on the sockets: a close at shutdown waits for an ask under way."""

    def __init__(self, endpoints: tuple[str, ...]) -> None:
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._clients = {e: SyncClient(e, self._ctx) for e in endpoints}
        self._lock = threading.Lock()

    def ask(self) -> dict[str, BrokerSeen | None]:
        with self._lock:
            return self._ask()

    def _ask(self) -> dict[str, BrokerSeen | None]:
        seen: dict[str, BrokerSeen | None] = {}
        for endpoint, client in self._clients.items():
            try:
                # MDP asks for a body, even an empty one (RFC 7's REQUEST).
                seen[endpoint] = broker_seen(client.raw(
                    "mmi.broker", b"", timeout_s=BROKER_TIMEOUT_S, retries=0))
            except CallFailed:
                seen[endpoint] = None
        return seen

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                with contextlib.suppress(zmq.ZMQError):
                    client.close()
            self._ctx.term()


scrape = APIRouter(tags=["metrics"])


@scrape.get("/metrics", dependencies=[Depends(who)], response_class=Response, responses={
    200: {"content": {CONTENT_TYPE_LATEST: {}}},
    401: {"description": "No token, or a wrong one (login_required)"},
    403: {"description": "Not from this machine (no token configured on the server)"}})
async def metrics(console: Annotated[ConsoleState, Depends(state_of)]) -> Response:
    """The tree's metrics for Prometheus (docs/metrics.md). Async: read in the event loop,
    the only thread that changes them."""
    return Response(generate_latest(console.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def poll(console: ConsoleState) -> None:
    """Until cancelled: the brokers', the agents' facts and the console's backlog into the
    metrics."""
    brokers = Brokers(broker_endpoints(console.settings))
    try:
        await _poll(console, brokers)
    finally:
        await asyncio.to_thread(brokers.close)


async def _poll(console: ConsoleState, brokers: Brokers) -> None:
    warned = False
    while True:
        try:
            console.metrics.tracker.brokers = await asyncio.to_thread(brokers.ask)
            await _look(console)
            warned = False
        except CallFailed as exc:
            if not warned:
                logger.warning("console: metrics: the agents cannot be looked at ({})", exc)
                warned = True
        except Exception:  # a bug: say so, and keep the other metrics going
            logger.exception("console: metrics: looking at the agents failed")
        await asyncio.sleep(POLL_S)


async def _look(console: ConsoleState) -> None:
    metrics = console.metrics
    try:
        metrics.console_backlog = console.audit.link.outbox.count()
    except sqlite3.Error as exc:
        logger.warning("console: metrics: cannot count the audit outbox: {}", exc)
        metrics.console_backlog = None
    reply = await console.link.call("monitor_router", MonitorStatus(), timeout_s=2.0,
                                    retries=1)
    if not isinstance(reply, MonitorStatusReply):
        raise CallFailed("unexpected_reply", f"monitor_router answered {reply.type_name}")
    queues = await console.link.call("dispatcher", ListQueues(), timeout_s=2.0, retries=1)
    if isinstance(queues, QueueReply):  # work queues and pools (docs/queues.md)
        metrics.tracker.on_queues(queues.queues, list(queues.detail.get("agents", [])))
    wall = time.time()
    heartbeats = {a.machine_id: wall - a.age_s for a in reply.agents}
    machines = sorted(set(heartbeats) | metrics.tracker.machines)
    connected: dict[str, bool] = {}
    try:
        for machine in machines:
            answer = await console.link.raw("mmi.service", f"agent.{machine}".encode())
            connected[machine] = answer[:1] == [b"200"]
    except CallFailed:
        # The broker does not answer: whether they are connected is unknown, not "no".
        metrics.tracker.on_agents(heartbeats, None)
        return
    metrics.tracker.on_agents(heartbeats, connected)
