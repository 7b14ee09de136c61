"""The monitor_router actor process: keeps the agents' heartbeats, answers ResolveMonitor.

Nothing here is durable: after a restart the router knows no agent until its next heartbeat
(2 s by default), and resolves to the composite meanwhile, which is what the spec asks for
when the geometry is unknown.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from loguru import logger

from actors.base import Actor, Incoming, MachineOf
from actors.monitor_router.core import MonitorRouterConfig, MonitorRouterCore
from messages.base import Message
from messages.control import Ping
from messages.monitor import (
    AgentHeartbeat,
    AgentScreenInfo,
    MonitorStatus,
    MonitorStatusReply,
    ResolveMonitor,
)
from messages.replay import Ack
from runtime.settings import Settings

EXPIRE_EVERY_S = 60.0


def _machine(msg: Any) -> str:
    return str(msg.machine_id)


class MonitorRouterActor(Actor):
    """Resolves which monitor of an agent an action targets (docs/screens-and-pauses.md)."""

    service = "monitor_router"
    # An agent (authenticated with CURVE) sends its own screen's heartbeats, nothing else.
    agent_requests: ClassVar[Mapping[type[Message], MachineOf | None]] = {
        Ping: None, AgentHeartbeat: _machine}

    def __init__(self, settings: Settings, config: MonitorRouterConfig | None = None) -> None:
        super().__init__(settings)
        self.core = MonitorRouterCore(config or MonitorRouterConfig())
        self.handle(AgentHeartbeat, self.on_heartbeat)
        self.handle(ResolveMonitor, self.on_resolve)
        self.handle(MonitorStatus, self.on_status)
        self.every(EXPIRE_EVERY_S, self.expire)

    def on_start(self) -> None:
        logger.info("monitor_router: {}", self.core.config)

    def on_heartbeat(self, msg: AgentHeartbeat, _req: Incoming) -> Message:
        known = msg.machine_id in self.core.agents
        screen = self.core.heartbeat(msg, time.monotonic())
        if screen is None:
            return Ack(status="stale")
        if not known:
            logger.info("monitor_router: {} has {} monitor(s), focus {}", msg.machine_id,
                        len(screen.monitors), screen.monitor_index)
        return Ack(detail={"monitors": len(screen.monitors)})

    def on_resolve(self, msg: ResolveMonitor, _req: Incoming) -> Message:
        routed = self.core.resolve(msg, time.monotonic())
        for topic, data in routed.events:
            self.publish(topic, at=time.time(), **data)
        return routed.target

    def on_status(self, msg: MonitorStatus, _req: Incoming) -> Message:
        now = time.monotonic()
        return MonitorStatusReply(agents=[
            AgentScreenInfo(machine_id=a.machine_id, monitor_index=a.monitor_index,
                            monitors_geometry=list(a.monitors),
                            active_window_title=a.active_window_title, at=a.sent_at,
                            age_s=round(now - a.received_at, 3))
            for a in self.core.agents.values()
            if msg.machine_id is None or a.machine_id == msg.machine_id])

    def expire(self, now: float) -> None:
        for machine_id in self.core.expire(now):
            logger.info("monitor_router: forgot {} (silent)", machine_id)
