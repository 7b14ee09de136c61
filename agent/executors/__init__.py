"""Pluggable executors: ``simulated`` (in-memory desktop) and ``desktop`` (the real screen)."""

from __future__ import annotations

from agent.executors.base import ActionOutcome, Executor, ExecutorUnavailable
from agent.executors.scenario import Scenario, ScenarioError, load_scenario

EXECUTORS = ("simulated", "desktop")


def make_executor(name: str, scenario: Scenario | None = None) -> Executor:
    """The executor called ``name``; raises ExecutorUnavailable if it cannot run here."""
    if name == "simulated":
        from agent.executors.simulated import SimulatedExecutor

        return SimulatedExecutor(scenario)
    if name == "desktop":
        if scenario is not None:
            raise ExecutorUnavailable("--scenario only applies to the simulated executor")
        from agent.executors.desktop import DesktopExecutor

        return DesktopExecutor()
    raise ExecutorUnavailable(f"unknown executor {name!r} (choose from {', '.join(EXECUTORS)})")


__all__ = [
    "EXECUTORS",
    "ActionOutcome",
    "Executor",
    "ExecutorUnavailable",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "make_executor",
]
