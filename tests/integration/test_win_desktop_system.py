"""Several monitors (QW1) on Windows, through the whole system: the tree natively on Linux
(broker, dispatcher, monitor_router...), the agent from the shipped folder under Wine with
``--executor desktop``, on a desktop of two monitors, the left one at x = -1280
(tests/win_desktop.py). Borderless Win32 windows cover each monitor and record where the
clicks land (tests/fixtures/win_target.py). ``lea-agent status`` tells the display scaling.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from messages.monitor import MonitorResolution, ResolveMonitor
from tests.conftest import Spawn, wait_until
from tests.integration.probes import reports
from tests.integration.system import System, workflow
from tests.integration.transport_checks import agent_log, wait_ready
from tests.win_desktop import LEFT, PRIMARY, WinDesk, WinTarget
from tests.wine import WineAgent, windows_path

PAUSED = "paused_need_help"
PATIENT = {
    # A Windows process under Wine starts in seconds on a busy machine: no heartbeat timing
    # decides anything here; the loop detector is not what is tested.
    "LEA_BEACON_TIMEOUT_S": "60", "LEA_HEARTBEAT_INTERVAL_MS": "500",
    "LEA_HEARTBEAT_LIVENESS": "6", "RPA_LOOP_DETECTOR_ENABLED": "0",
    "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60",
}

pytestmark = pytest.mark.timeout(400)


@pytest.fixture
def covers(win_desk: WinDesk) -> Iterator[dict[int, WinTarget]]:
    made = {1: win_desk.target("Ecran gauche", LEFT, "--popup", "--no-edit"),
            0: win_desk.target("Ecran principal", PRIMARY, "--popup", "--no-edit")}
    yield made
    for t in made.values():
        t.close()


@pytest.fixture
def desk_agent(win_desk: WinDesk, spawn: Spawn, lea_env: dict[str, str],
               tmp_path: Path) -> Iterator[WineAgent]:
    system = System(spawn, lea_env, tmp_path, PATIENT, ready_timeout=120)
    agent = WineAgent(win_desk.bundle, system, "win1",
                      extra_env={"DISPLAY": win_desk.display.display,
                                 "RPA_HUMAN_CORRECTION_TIMEOUT_S": "2"},
                      extra_args=["--executor", "desktop"])
    # Windows python imports the desktop executor's libraries in seconds, more under load.
    wait_until(lambda: "dispatcher answered hello" in agent_log(agent), timeout=180)
    wait_ready(system, agent)
    yield agent
    if agent.proc is not None and agent.proc.poll() is None:
        agent.proc.send_signal(signal.SIGKILL)
        try:
            agent.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def routed(system: System, index: int, geometry: dict[str, Any] | None = None
           ) -> MonitorResolution:
    reply = system.call("monitor_router", ResolveMonitor.model_validate({
        "machine_id": "win1", "action_id": "probe", "action_type": "click",
        "monitor_index": index, "monitor_geometry": geometry}))
    assert isinstance(reply, MonitorResolution), reply
    return reply


def test_two_monitors_heartbeats_clicks_routing_by_geometry_and_the_fail_closed_pause(
        desk_agent: WineAgent, covers: dict[int, WinTarget]) -> None:
    system = desk_agent.system
    # The agent's heartbeats told the router both monitors, the left one at x = -1280.
    left = wait_until(lambda: (r := routed(system, 1)).source == "action" and r, timeout=30)
    assert isinstance(left, MonitorResolution)
    assert (left.offset_x, left.offset_y, left.w, left.h) == LEFT
    primary = routed(system, 0)
    assert (primary.offset_x, primary.offset_y, primary.w, primary.h) == PRIMARY
    # Recorded on a workstation where the left screen was monitor 0: found by geometry.
    recorded_left = {"idx": 0, "x": -1280, "y": 0, "w": 1280, "h": 1024,
                     "name": "\\\\.\\DISPLAY2"}
    rid = system.start(workflow(
        {"type": "click", "monitor_index": 1, "target_spec": {"x_pct": 0.25, "y_pct": 0.5}},
        {"type": "click", "monitor_index": 0, "target_spec": {"x_pct": 0.75, "y_pct": 0.25}},
        {"type": "click", "monitor_index": 0, "monitor_geometry": recorded_left,
         "target_spec": {"x_pct": 0.5, "y_pct": 0.75}}), "win1")
    done = system.wait_status(rid, "completed", PAUSED, timeout=120)
    assert done.status == "completed", done
    on_left = [(c["x"], c["y"]) for c in covers[1].events("click")]
    on_primary = [(c["x"], c["y"]) for c in covers[0].events("click")]
    expected_left = [(-1280 + 320, 512), (-1280 + 640, 768)]
    assert len(on_left) == 2 and len(on_primary) == 1, (on_left, on_primary)
    for (x, y), (ex, ey) in zip(on_left + on_primary, [*expected_left, (1440, 270)],
                                strict=True):
        assert abs(x - ex) <= 2 and abs(y - ey) <= 2, (on_left, on_primary)
    positions = {r["action_id"]: r["body"]["actual_position"] for r in reports(system, rid)}
    assert (positions["s2"]["x"], positions["s2"]["y"]) == (-640, 768)
    assert [e["action_id"] for e in desk_agent.effects()] == ["s0", "s1", "s2"]

    # lea-agent status: the DPI awareness in effect, what Windows (here Wine) answered the
    # agent's request for it, and each monitor's scale.
    def said() -> str:
        return desk_agent.bundle.run_python("-m", "agent", "status", "--data-dir",
                                            windows_path(desk_agent.data_dir)).stdout

    status = wait_until(lambda: "display scaling" in (text := said()) and text, timeout=60)
    assert ("display scaling: per-monitor DPI aware (SetProcessDpiAwarenessContext("
            "PER_MONITOR_AWARE_V2) refused, error 87; SetProcessDpiAwareness(PER_MONITOR) "
            "refused, HRESULT 0x80070005); monitors: 1920x1080 at (0, 0) 100 %, 1280x1024 at "
            "(-1280, 0) 100 %") in status, status
    assert "CLICKS REFUSED" not in status

    # What the UAC secure desktop or the lock screen look like to the agent (an untitled
    # window in front): the replay pauses for a person, nothing reaches any window.
    covers[0].send("front")
    covers[0].send("title ")
    rid = system.start(workflow(
        {"type": "click", "monitor_index": 0, "target_spec": {"x_pct": 0.5, "y_pct": 0.5}},
        workflow_id="wf2"), "win1")
    paused = system.wait_status(rid, PAUSED, "completed", timeout=120)
    assert paused.status == PAUSED and paused.pause_reason == "system_dialog", paused
    (report,) = reports(system, rid)
    assert report["error"] == "system_dialog:untitled_foreground_window", report
    assert report["body"]["needs_human"]
    time.sleep(0.5)
    assert len(covers[0].events("click")) == 1 and len(covers[1].events("click")) == 2
    assert len(desk_agent.effects()) == 3
