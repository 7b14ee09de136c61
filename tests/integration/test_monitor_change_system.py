"""Monitors unplugged or renumbered between a recording and its replay, on a real X display
(Xvfb monitors changed with xrandr), through the whole system: broker, dispatcher, monitor
router and an agent started with ``--executor desktop``, every one its own process.

A step recorded on the second screen (its ``monitor_index`` and ``monitor_geometry``, as
the agent saw them at the recording) must run on that physical screen wherever it now is,
and nowhere else: when it is gone, no input at all, and the replay waits for a person.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.click_window import Target
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import reports
from tests.integration.system import System, workflow
from tests.xdisplay import XDisplayFactory, relayout

RECORDED = [(1280, 1024, 0, 0), (1920, 1080, 1280, 0)]
PAUSED = "paused_need_help"

pytestmark = pytest.mark.timeout(240)


def recorded_second_screen(display: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Monitor 1 as the agent's geometry reads it now (the recording)."""
    from agent.screen import geometry

    monkeypatch.setenv("DISPLAY", display)
    (second,) = [m for m in geometry.monitors_geometry() if m.idx == 1]
    assert second.rect == (1280, 0, 1920, 1080)
    return second.model_dump()


def start(spawn: Spawn, env: dict[str, str], tmp: Path, display: str) -> tuple[System, Path]:
    system = System(spawn, env, tmp, extra_env={"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60"})
    effects = tmp / "effects.jsonl"
    spawn(python_argv("-m", "agent", "--machine-id", "ws1", "--executor", "desktop",
                      "--data-dir", str(tmp / "agent-data"), "--effects-log", str(effects)),
          env={**system.env, "DISPLAY": display}, name="agent-ws1")
    wait_until(lambda: any("dispatcher answered hello" in log.read_text(errors="replace")
                           for log in tmp.glob("agent-ws1-*.log")), timeout=90)
    return system, effects


def click_on_recorded(second: dict[str, Any], x: float, y: float) -> dict[str, Any]:
    return {"type": "click", "monitor_index": 1, "monitor_geometry": second,
            "target_spec": {"x_pct": (x - second["x"]) / second["w"],
                            "y_pct": (y - second["y"]) / second["h"]}}


def inputs(effects: Path) -> list[dict[str, Any]]:
    if not effects.exists():
        return []
    return [json.loads(line) for line in effects.read_text().splitlines() if line.strip()]


def test_the_screen_that_took_the_unplugged_monitors_number_gets_no_input(
        xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    display = xdisplay(RECORDED, window_manager=True)
    second = recorded_second_screen(display, monkeypatch)
    # Unplugged: a smaller screen now stands where it stood, and is monitor 1.
    relayout(display, RECORDED, [(1280, 1024, 0, 0), (1600, 900, 1280, 0)])
    target = Target(display, tmp_path, "Dossier patient", 1300, 40)  # on the new screen
    try:
        system, effects = start(spawn, lea_env, tmp_path, display)
        spot = (target.canvas[0] + 200, target.canvas[1] + 150)
        rid = system.start(workflow(click_on_recorded(second, *spot)), "ws1")
        s = system.wait_status(rid, PAUSED, "completed", timeout=90)
        assert (s.status, s.pause_reason) == (PAUSED, "needs_human"), s
        assert s.pause_message is not None and "monitor_unavailable" in s.pause_message
        (report,) = reports(system, rid)
        assert report["error"] == "monitor_unavailable"
        assert inputs(effects) == [] and target.events("click") == []
    finally:
        target.close()


def test_a_renumbered_screen_is_found_again_by_its_geometry(
        xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded second screen became the primary (monitor 0); the old primary is now
    monitor 1. The click lands on the recorded screen, not on the one with its number."""
    display = xdisplay(RECORDED, window_manager=True)
    second = recorded_second_screen(display, monkeypatch)
    relayout(display, RECORDED, [(1920, 1080, 1280, 0), (1280, 1024, 0, 0)])
    monkeypatch.setenv("DISPLAY", display)
    from agent.screen import geometry

    assert [m.rect for m in geometry.monitors_geometry()][:1] == [(1280, 0, 1920, 1080)]
    right = Target(display, tmp_path, "Dossier patient", 1500, 100)
    left = Target(display, tmp_path, "Autre patient", 100, 100)
    try:
        system, effects = start(spawn, lea_env, tmp_path, display)
        spot = (right.canvas[0] + 200, right.canvas[1] + 150)
        rid = system.start(workflow(click_on_recorded(second, *spot)), "ws1")
        system.wait_status(rid, "completed", timeout=90)
        clicks = right.events("click")
        assert len(clicks) == 1 and abs(clicks[0]["x"] - spot[0]) <= 2, clicks
        assert left.events("click") == [] and len(inputs(effects)) == 1
    finally:
        right.close()
        left.close()


def test_an_agent_that_cannot_list_its_monitors_acts_on_no_named_monitor(
        xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str],
        tmp_path: Path) -> None:
    """No RandR: the agent's monitors cannot be listed, its heartbeats carry none and the
    router answers the composite. A step recorded on monitor 0 is not placed on the
    composite (here a window's canvas under its middle): no input, a person decides. A step
    that names no monitor still runs on the composite."""
    display = xdisplay([(1600, 900, 0, 0)], window_manager=True, randr=False)
    target = Target(display, tmp_path, "Dossier patient", 500, 250)
    try:
        assert target.canvas[0] < 800 < target.canvas[0] + target.canvas[2]
        assert target.canvas[1] < 450 < target.canvas[1] + target.canvas[3]
        system, effects = start(spawn, lea_env, tmp_path, display)
        middle = {"type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.5}}
        rid = system.start(workflow({**middle, "monitor_index": 0}), "ws1")
        s = system.wait_status(rid, PAUSED, "completed", timeout=90)
        assert (s.status, s.pause_reason) == (PAUSED, "needs_human"), s
        assert s.pause_message is not None and "monitor_unavailable" in s.pause_message
        (report,) = reports(system, rid)
        assert report["error"] == "monitor_unavailable" and report["body"]["needs_human"]
        assert "cannot be listed" in report["body"]["target_description"]
        assert inputs(effects) == [] and target.events("click") == []

        rid2 = system.start(workflow(middle, workflow_id="wf2"), "ws1")
        system.wait_status(rid2, "completed", timeout=90)
        (click,) = target.events("click")
        assert abs(click["x"] - 800) <= 2 and abs(click["y"] - 450) <= 2
    finally:
        target.close()


def test_the_agent_finds_the_recorded_screen_itself_with_the_router_frozen(
        xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The dispatcher does not ask the monitor router on a click's way: the agent applies the
    router's rule to its own screen at the moment of the action (docs/screens-and-pauses.md).
    With the router frozen, the renumbered recorded screen is still the one clicked, and the
    effects log says the agent routed it (a dispatcher that asked would have waited for the
    router and sent ``router_unavailable``); the report names the monitor found."""
    display = xdisplay(RECORDED, window_manager=True)
    second = recorded_second_screen(display, monkeypatch)
    relayout(display, RECORDED, [(1920, 1080, 1280, 0), (1280, 1024, 0, 0)])
    right = Target(display, tmp_path, "Dossier patient", 1500, 100)
    try:
        system, effects = start(spawn, lea_env, tmp_path, display)
        frozen = system.kill("monitor_router", signal.SIGSTOP)
        try:
            spot = (right.canvas[0] + 200, right.canvas[1] + 150)
            rid = system.start(workflow(click_on_recorded(second, *spot)), "ws1")
            system.wait_status(rid, "completed", timeout=90)
        finally:
            with contextlib.suppress(ProcessLookupError):  # its supervisor may have ended it
                os.kill(frozen, signal.SIGCONT)
        (click,) = right.events("click")
        assert abs(click["x"] - spot[0]) <= 2 and abs(click["y"] - spot[1]) <= 2
        assert [e["monitor"] for e in inputs(effects)] == ["agent_routes"]
        (report,) = reports(system, rid)
        routed = report["body"]["monitor_resolution"]
        assert (routed["idx"], routed["offset_x"], routed["source"]) == (0, 1280, "action")
    finally:
        right.close()
