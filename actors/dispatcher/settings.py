"""The dispatcher's settings from the environment: which actors it consults, how long it waits.

The switches keep the spec's names (``RPA_LOOP_DETECTOR_ENABLED``, ``RPA_SAFETY_CHECKS_*``,
and the watchdog's orphan timeout, which bounds a claim's grant), read by the same classes as
the actors that own them; routing has no switch in the spec, ours is
``LEA_DISPATCHER_AGENT_ROUTES``: the agent finds a screen action's monitor itself, by the
monitor router's rule (``DispatchAction.agent_routes``, docs/screens-and-pauses.md).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from actors.dispatcher.machine.state import DispatcherConfig
from actors.safety_checks.core import SafetyChecksConfig
from actors.watchdog.core import WatchdogConfig

PAYLOAD_MARGIN_S = 2.0
"""Beyond the model's own timeout: the safety_checks actor answers within it plus its work."""


class LoopSwitch(BaseSettings):
    """``RPA_LOOP_DETECTOR_ENABLED`` (docs/operations.md) and how long a verdict may take."""

    model_config = SettingsConfigDict(env_prefix="RPA_LOOP_DETECTOR_", frozen=True)

    enabled: bool = True
    timeout_s: float = Field(2.0, gt=0, le=60)


class ConsultSettings(BaseSettings):
    """``LEA_DISPATCHER_*``: the monitor router consultation."""

    model_config = SettingsConfigDict(env_prefix="LEA_DISPATCHER_", frozen=True)

    agent_routes: bool = True
    route_timeout_s: float = Field(1.0, gt=0, le=60)
    safety_checks_enabled: bool = True


def config_from_env() -> DispatcherConfig:
    """The core's configuration as the environment sets it (every consultation on)."""
    loop, consult, safety = LoopSwitch(), ConsultSettings(), SafetyChecksConfig()
    watchdog = WatchdogConfig()
    return DispatcherConfig(
        loop_detector=loop.enabled, loop_timeout_s=loop.timeout_s,
        agent_routes=consult.agent_routes, route_timeout_s=consult.route_timeout_s,
        safety_checks=consult.safety_checks_enabled,
        payload_timeout_s=safety.llm_timeout_s + PAYLOAD_MARGIN_S,
        llm_timeout_s=safety.llm_timeout_s,
        llm_enabled=safety.llm_enabled, llm_fail_closed=safety.llm_fail_mode == "closed",
        orphan_timeout_s=watchdog.orphan_timeout_s if watchdog.enabled else None)
