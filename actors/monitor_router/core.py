"""Which monitor of an agent an action runs on (docs/screens-and-pauses.md): pure, no sockets, no
clock.

The cascade, for one action and the agent's last heartbeat:

1. No heartbeat, a stale one, or ``monitors_geometry == []`` → the composite
   (``composite_fallback``): the agent cannot do better than the whole desktop.
2. The action names a monitor (``monitor_index`` and/or the recorded ``monitor_geometry``):
   - an index outside ``0..MAX_MONITORS-1`` → the composite, ``lea:monitor_invalid_index``
     (a workflow cannot name one: messages/workflow.py bounds it by the same constant; the
     agent refuses an action routed so, agent/executors/desktop_target.py);
   - found among the agent's monitors → that one (``action``). With a recorded geometry the
     same *physical* screen is looked for, never just the same number: same rectangle (and
     name), else same name and size (moved: ``reason="moved"``), else same rectangle
     (``renamed``); a different idx for it is ``renumbered``;
   - not found (unplugged) → ``lea:monitor_unavailable`` and step 3.
3. The focused monitor of the last heartbeat (``focus``), else the composite (``no_focus``).

Steps 2 and 3 are :func:`workflow.monitors.route`, the rule the agent also applies to its own
screen when the dispatcher leaves the monitor to it (``DispatchAction.agent_routes``).

Every resolution is announced as ``lea:monitor_routed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from messages import events
from messages.monitor import (
    COMPOSITE,
    MAX_MONITORS,
    AgentHeartbeat,
    Monitor,
    MonitorResolution,
    ResolveMonitor,
)
from workflow.monitors import route


class MonitorRouterConfig(BaseSettings):
    """``LEA_MONITOR_ROUTER_*``: how long a heartbeat is believed, how long an agent is kept."""

    model_config = SettingsConfigDict(env_prefix="LEA_MONITOR_ROUTER_", frozen=True)

    heartbeat_ttl_s: float = Field(10.0, gt=0)
    """Past this age (5 agent heartbeats at the default 2 s) geometry and focus are unknown."""
    forget_after_s: float = Field(3600.0, gt=0)
    max_agents: int = Field(10_000, ge=1)


@dataclass(frozen=True, slots=True)
class AgentScreen:
    """An agent's last heartbeat; ``received_at`` is the router's clock, not the agent's."""

    machine_id: str
    monitors: tuple[Monitor, ...]
    monitor_index: int | None
    active_window_title: str | None
    sent_at: float
    received_at: float


@dataclass(frozen=True, slots=True)
class Routed:
    """A resolution and the bus events it implies, ``(topic, data)``."""

    target: MonitorResolution
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def resolve(request: ResolveMonitor, agent: AgentScreen | None, now: float,
            ttl_s: float) -> Routed:
    """The monitor ``request``'s action runs on; ``now`` is on the clock of ``received_at``."""
    who = {"machine_id": request.machine_id, "action_id": request.action_id,
           "action_type": request.action_type, "replay_id": request.replay_id,
           "session_id": request.session_id}
    out: list[tuple[str, dict[str, Any]]] = []
    target = _cascade(request, agent, now, ttl_s, who, out)
    out.append((events.MONITOR_ROUTED, {**who, "idx": target.idx, "source": target.source,
                                        "reason": target.reason, "offset_x": target.offset_x,
                                        "offset_y": target.offset_y, "w": target.w,
                                        "h": target.h}))
    return Routed(target, out)


def _cascade(request: ResolveMonitor, agent: AgentScreen | None, now: float, ttl_s: float,
             who: dict[str, Any], out: list[tuple[str, dict[str, Any]]]) -> MonitorResolution:
    if agent is None:
        return COMPOSITE.model_copy(update={"reason": "no_heartbeat"})
    if now - agent.received_at > ttl_s:
        return COMPOSITE.model_copy(update={"reason": "stale_heartbeat"})
    index, recorded = request.monitor_index, request.monitor_geometry
    routed = route(agent.monitors, agent.monitor_index, index, recorded)
    if routed.invalid_index:
        out.append((events.MONITOR_INVALID_INDEX, {
            **who, "monitor_index": index, "monitors": len(agent.monitors),
            "detail": f"monitor_index must be 0..{MAX_MONITORS - 1}"}))
    if routed.recorded_unavailable:
        out.append((events.MONITOR_UNAVAILABLE, {
            **who, "monitor_index": index,
            "monitor_geometry": None if recorded is None else recorded.model_dump(),
            "monitors": [m.model_dump() for m in agent.monitors],
            "fallback": routed.target.source}))
    return routed.target


class MonitorRouterCore:
    """Each agent's last heartbeat, keyed by machine id, and the resolutions made from them."""

    def __init__(self, config: MonitorRouterConfig | None = None) -> None:
        self.config = config or MonitorRouterConfig()
        self.agents: dict[str, AgentScreen] = {}

    def heartbeat(self, msg: AgentHeartbeat, now: float) -> AgentScreen | None:
        """Remember ``msg`` (received at ``now``) as this agent's screen; None if it is older
        than the fresh one already known (a request the broker queued and delivered late).
        """
        known = self.agents.get(msg.machine_id)
        if known is not None and msg.at < known.sent_at \
                and now - known.received_at <= self.config.heartbeat_ttl_s:
            return None  # past the TTL anything goes: the agent's clock may have jumped back
        screen = AgentScreen(msg.machine_id, tuple(msg.monitors_geometry), msg.monitor_index,
                             msg.active_window_title, msg.at, now)
        self.agents.pop(msg.machine_id, None)  # re-inserted last: dicts keep arrival order
        self.agents[msg.machine_id] = screen
        while len(self.agents) > self.config.max_agents:
            del self.agents[next(iter(self.agents))]  # the longest silent one
        return screen

    def resolve(self, request: ResolveMonitor, now: float) -> Routed:
        return resolve(request, self.agents.get(request.machine_id), now,
                       self.config.heartbeat_ttl_s)

    def expire(self, now: float) -> list[str]:
        """Forget agents silent for ``forget_after_s``; their machine ids."""
        gone = [k for k, a in self.agents.items()
                if now - a.received_at > self.config.forget_after_s]
        for k in gone:
            del self.agents[k]
        return gone
