"""The actors' settings, checked once before the tree starts (docs/operations.md, "Settings").

Every actor reads its own variables when it starts; a value it cannot take would only show
as a child crash-looping (or, for the loop detector, a warning and the default). Here the
tree refuses to start instead, naming the variable: a bad value, or a value that is read but
not implemented (``RPA_WATCHDOG_REPUSH_POSITION=tail``). A name nothing reads (a typo) has
already stopped the process when it loaded its settings (runtime/setting_names.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from actors.dispatcher.settings import ConsultSettings, LoopSwitch
from actors.loop_detector.config import LoopConfig
from actors.monitor_router.core import MonitorRouterConfig
from actors.safety_checks.core import SafetyChecksConfig
from actors.watchdog.core import WatchdogConfig

_SETTINGS: tuple[tuple[type[BaseSettings], str], ...] = (
    (WatchdogConfig, "RPA_WATCHDOG_"),
    (SafetyChecksConfig, "RPA_SAFETY_CHECKS_"),
    (LoopSwitch, "RPA_LOOP_DETECTOR_"),
    (ConsultSettings, "LEA_DISPATCHER_"),
    (MonitorRouterConfig, "LEA_MONITOR_ROUTER_"),
)


def settings_problems() -> list[str]:
    """One line per variable of the environment the actors cannot honour, naming it; []
    when all is well."""
    env = os.environ
    problems: list[str] = []
    for cls, prefix in _SETTINGS:
        problems += _invalid(cls, prefix, env)
    _config, loop_problems = LoopConfig.from_env(env)
    problems += loop_problems
    return problems


def _invalid(cls: type[BaseSettings], prefix: str, env: Mapping[str, str]) -> list[str]:
    try:
        cls()
    except ValidationError as exc:
        out = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else ""
            var = "OLLAMA_URL" if field == "ollama_url" else prefix + field.upper()
            out.append(f"{var}={env.get(var, '')!r}: {err['msg']}")
        return out
    return []
