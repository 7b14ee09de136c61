"""The tree ``python run.py`` starts: the broker first, then the six actors."""

from __future__ import annotations

import sys

from actors import ACTORS
from actors.logs import setup_logging
from broker.config import Settings
from supervision.child import ChildSpec
from supervision.policy import RestartIntensity, Strategy
from supervision.supervisor import Supervisor


def tree_specs(settings: Settings) -> list[ChildSpec]:
    """Child specs in start order; every child is permanent."""
    def spec(name: str, *module: str) -> ChildSpec:
        return ChildSpec(name, [sys.executable, "-m", *module],
                         shutdown_timeout_s=settings.shutdown_timeout_s,
                         beacon_timeout_s=settings.beacon_timeout_s)

    return [spec("broker", "broker"), *(spec(name, "actors", name) for name in ACTORS)]


def build_tree(settings: Settings) -> Supervisor:
    return Supervisor(
        tree_specs(settings),
        Strategy(settings.supervisor_strategy),
        RestartIntensity(settings.restart_intensity, settings.restart_period_s),
        settings,
    )


def run_tree(settings: Settings) -> int:
    """Run the tree in the foreground until SIGTERM / Ctrl-C (0) or intensity exceeded (1)."""
    setup_logging("supervisor", settings.log_level)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return build_tree(settings).run()
