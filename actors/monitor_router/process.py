"""The monitor_router actor process."""

from __future__ import annotations

from actors.base import Actor


class MonitorRouterActor(Actor):
    """Resolves which monitor of an agent an action targets (spec/01 §4)."""

    service = "monitor_router"
