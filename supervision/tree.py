"""The tree ``python run.py`` starts: the broker first, then the six actors, then the
supervisor console (a client of them all) unless ``console_port`` is 0."""

from __future__ import annotations

import sys
from pathlib import Path

from actors import ACTORS
from audit_outbox.store import DB_NAME as AUDIT_OUTBOX
from runtime.logs import setup_logging
from runtime.settings import Settings
from supervision.child import ChildSpec
from supervision.policy import RestartIntensity, Strategy
from supervision.supervisor import Supervisor

CONSOLE = "console"


def child_argv(name: str) -> list[str]:
    """The module arguments of the child ``name`` (``broker``, an actor or ``console``)."""
    if name in ("broker", CONSOLE):
        return ["-m", name]
    return ["-m", "actors", name]


def child_pid(supervisor_pid: int, name: str) -> int | None:
    """The pid of the running child ``name`` of the tree run by ``supervisor_pid`` (Linux).

    For operators and tests that need to signal one child; None if it is not running.
    """
    wanted = [arg.encode() for arg in child_argv(name)]
    try:
        children = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text()
    except FileNotFoundError:
        return None
    for pid in children.split():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue  # exited meanwhile
        if argv[1:1 + len(wanted)] == wanted:
            return int(pid)
    return None


def tree_specs(settings: Settings) -> list[ChildSpec]:
    """Child specs in start order; every child is permanent."""
    return [ChildSpec(name, [sys.executable, *child_argv(name)],
                      shutdown_timeout_s=settings.shutdown_timeout_s,
                      beacon_timeout_s=settings.beacon_timeout_s)
            for name in ("broker", *ACTORS, *((CONSOLE,) if settings.console_port else ()))]


def build_tree(settings: Settings) -> Supervisor:
    return Supervisor(
        tree_specs(settings),
        Strategy(settings.supervisor_strategy),
        RestartIntensity(settings.restart_intensity, settings.restart_period_s),
        settings,
        audit_outbox=settings.data_dir / AUDIT_OUTBOX,
    )


def run_tree(settings: Settings) -> int:
    """Run the tree in the foreground until SIGTERM / Ctrl-C (0) or intensity exceeded (1)."""
    setup_logging("supervisor", settings.log_level)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return build_tree(settings).run()
