"""The actor processes of the tree, and the base they share."""

from __future__ import annotations

import importlib

from actors.base import Actor, Incoming

# Service name → "module:class"; imported lazily so one actor never loads another's code.
ACTORS: dict[str, str] = {
    "dispatcher": "actors.dispatcher.process:DispatcherActor",
    "watchdog": "actors.watchdog.process:WatchdogActor",
    "loop_detector": "actors.loop_detector.process:LoopDetectorActor",
    "safety_checks": "actors.safety_checks.process:SafetyChecksActor",
    "monitor_router": "actors.monitor_router.process:MonitorRouterActor",
    "audit_log": "actors.audit_log.process:AuditLogActor",
}


def actor_class(name: str) -> type[Actor]:
    """The actor class serving ``name``; KeyError if there is none."""
    module, _, cls = ACTORS[name].partition(":")
    found: type[Actor] = getattr(importlib.import_module(module), cls)
    return found


__all__ = ["ACTORS", "Actor", "Incoming", "actor_class"]
