"""The actors' settings, checked once before the tree starts (README: settings).

Every actor reads its own variables when it starts; a value it cannot take would only show
as a child crash-looping (or, for the loop detector, a warning and the default). Here the
tree refuses to start instead, naming the variable: a bad value, a name no actor reads under
an actor's own prefix (a typo would otherwise be a setting that silently does nothing), or a
value that is read but not implemented (``RPA_WATCHDOG_REPUSH_POSITION=tail``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from actors.dispatcher.settings import ConsultSettings, LoopSwitch
from actors.loop_detector.config import ENV as LOOP_ENV
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
_LOOP_PREFIX = "RPA_LOOP_"
_OTHER_NAMES = frozenset({"OLLAMA_URL"})


def _known(cls: type[BaseSettings], prefix: str) -> set[str]:
    return {prefix + name.upper() for name in cls.model_fields}


def settings_problems() -> list[str]:
    """One line per variable of the environment the actors cannot honour, naming it; []
    when all is well."""
    env = os.environ
    known = {name for cls, prefix in _SETTINGS for name in _known(cls, prefix)}
    known |= set(LOOP_ENV.values())
    problems: list[str] = []
    for cls, prefix in _SETTINGS:
        problems += _invalid(cls, prefix, env)
    _config, loop_problems = LoopConfig.from_env(env)
    problems += loop_problems
    prefixes = (*(p for _c, p in _SETTINGS), _LOOP_PREFIX)
    for name in sorted(env):
        if name.startswith(prefixes) and name not in known and name not in _OTHER_NAMES:
            near = [k for k in sorted(known) if k.startswith(name.rsplit("_", 1)[0])][:3]
            problems.append(f"{name}: no such setting, nothing reads it"
                            + (f" (did you mean {' or '.join(near)}?)" if near else ""))
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
