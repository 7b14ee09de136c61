"""Every ``LEA_*`` / ``RPA_*`` environment variable some process of ours reads, and the rule for
the others (docs/operations.md, "Settings").

A variable under one of our prefixes that nothing reads is a setting that silently does
nothing: a hospital that misspells the console's session lifetime by one letter believes its
sessions last what it wrote. So every process checks its environment at start: a name that
looks like a known one (``difflib``) stops it with ``unknown setting X: did you mean Y?``; a
name that looks like none is only warned about (a variable of another tool that happens to
share a prefix), unless it is under a prefix only one of our readers uses (``RPA_WATCHDOG_``,
``LEA_OCR_``...): such a name is ours, and refused too.

The names of :class:`runtime.settings.Settings` come from its fields; every other name is
listed below, by the process that reads it (the readers stay where they are; a unit test scans
the source and fails on a name read anywhere that is not known here).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

PREFIXES = ("LEA_", "RPA_")

OTHER_NAMES: frozenset[str] = frozenset({
    # Every process (runtime/): the config file, JSON logs, the supervisor's beacon pipe.
    "LEA_CONFIG", "LEA_LOG_JSON", "LEA_BEACON_FD",
    # watchdog (actors/watchdog/core.py)
    "RPA_WATCHDOG_ENABLED", "RPA_WATCHDOG_SCAN_INTERVAL_S", "RPA_WATCHDOG_ORPHAN_TIMEOUT_S",
    "RPA_WATCHDOG_MAX_RESENDS", "RPA_WATCHDOG_REPUSH_POSITION",
    # safety_checks (actors/safety_checks/core.py)
    "RPA_SAFETY_CHECKS_LLM_ENABLED", "RPA_SAFETY_CHECKS_LLM_MODEL",
    "RPA_SAFETY_CHECKS_LLM_TIMEOUT_S", "RPA_SAFETY_CHECKS_LLM_MAX_CHECKS",
    "RPA_SAFETY_CHECKS_LLM_FAIL_MODE",
    # dispatcher (actors/dispatcher/settings.py)
    "LEA_DISPATCHER_AGENT_ROUTES", "LEA_DISPATCHER_ROUTE_TIMEOUT_S",
    "LEA_DISPATCHER_SAFETY_CHECKS_ENABLED", "RPA_LOOP_DETECTOR_TIMEOUT_S",
    # loop_detector (actors/loop_detector/config.py)
    "RPA_LOOP_DETECTOR_ENABLED", "RPA_LOOP_SCREEN_STATIC_THRESHOLD", "RPA_LOOP_SCREEN_STATIC_N",
    "RPA_LOOP_ACTION_REPEAT_N", "RPA_LOOP_RETRY_THRESHOLD", "RPA_LOOP_RING_SIZE",
    "RPA_LOOP_MAX_REPLAYS", "RPA_LOOP_EMBEDDER", "RPA_LOOP_CLIP_MODEL",
    "RPA_LOOP_CLIP_PRETRAINED",
    # monitor_router (actors/monitor_router/core.py)
    "LEA_MONITOR_ROUTER_HEARTBEAT_TTL_S", "LEA_MONITOR_ROUTER_FORGET_AFTER_S",
    "LEA_MONITOR_ROUTER_MAX_AGENTS",
    # the agent (agent/link/heartbeat.py, agent/executors/desktop_config.py,
    # agent/windows/pause_notice.py)
    "LEA_MONITOR_HEARTBEAT_ENABLED", "LEA_MONITOR_HEARTBEAT_INTERVAL_S",
    "LEA_MONITOR_HEARTBEAT_POLL_S", "LEA_MONITOR_HEARTBEAT_TIMEOUT_S",
    "RPA_HUMAN_CORRECTION_TIMEOUT_S",
    "LEA_DESKTOP_SCREENSHOT_FORMAT", "LEA_DESKTOP_SCREENSHOT_MAX_SIDE",
    "LEA_DESKTOP_SCREENSHOT_QUALITY", "LEA_DESKTOP_ANCHOR_MIN_SCORE",
    "LEA_DESKTOP_ANCHOR_SCALES", "LEA_DESKTOP_SCREEN_CHANGE_TIMEOUT_S",
    "LEA_DESKTOP_INPUT_PAUSE_S", "LEA_DESKTOP_TYPE_INTERVAL_S",
    "LEA_OCR_LANGS", "LEA_OCR_TESSDATA", "LEA_OCR_MIN_SCORE", "LEA_OCR_MARGIN",
    "LEA_PAUSE_WINDOW",
})

OWN_PREFIXES = (
    "RPA_WATCHDOG_", "RPA_SAFETY_CHECKS_", "RPA_LOOP_", "RPA_HUMAN_CORRECTION_",
    "LEA_DISPATCHER_", "LEA_MONITOR_ROUTER_", "LEA_MONITOR_HEARTBEAT_", "LEA_DESKTOP_",
    "LEA_OCR_", "LEA_CONSOLE_", "LEA_BROKER_", "LEA_HEARTBEAT_", "LEA_RESTART_",
)
"""Prefixes no other tool's variables share: an unknown name under one is a mistake."""

RENAMED: dict[str, str] = {
    # Monitor routing became the agent's own (docs/screens-and-pauses.md): the switch says so.
    "LEA_DISPATCHER_ROUTE_ENABLED": "LEA_DISPATCHER_AGENT_ROUTES",
}
"""Old names of settings, and their new ones: an old name stops the process as a misspelt
one does (it would silently do nothing), naming the new one."""

LOOK_ALIKE = 0.8
"""``difflib`` ratio from which an unknown name is taken for a misspelt known one. Our names
share long prefixes, so a lower cutoff would take any name under a prefix for a typo; at 0.8
one or two wrong, missing or swapped letters in a name of 15 or more still match."""


def unknown_settings(env: Iterable[str], known: Iterable[str]
                     ) -> tuple[list[str], list[str]]:
    """(refused, warned): one line per variable of ``env`` under our prefixes that ``known``
    lacks; refused when it looks like a known name (naming it) or is under one of
    :data:`OWN_PREFIXES`, warned otherwise."""
    names = sorted(set(known))
    refused: list[str] = []
    warned: list[str] = []
    for name in sorted(env):
        if not name.startswith(PREFIXES) or name in names:
            continue
        if name in RENAMED:
            refused.append(f"setting {name} was renamed to {RENAMED[name]}")
            continue
        near = difflib.get_close_matches(name, names, n=1, cutoff=LOOK_ALIKE)
        if near:
            refused.append(f"unknown setting {name}: did you mean {near[0]}?")
        elif name.startswith(OWN_PREFIXES):
            refused.append(f"unknown setting {name}: nothing reads it")
        else:
            warned.append(f"unknown setting {name}: nothing reads it")
    return refused, warned

