"""A click whose screen goes away right after it, on a real X display, through the whole
system (broker, dispatcher, monitor router, and an agent started with ``--executor
desktop``): the capture that follows the click fails, and the click is not done again.

Before, the desktop executor reported ``capture_failed`` as a plain failure and the
dispatcher retried the click as ``s0_retry1``; now the report says the input was performed
(``input_performed``) and the replay pauses for a person (``failed_after_input``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.click_window import Target
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import reports
from tests.integration.system import System, workflow
from tests.xdisplay import XDisplayFactory

MONITORS = [(1280, 1024, 0, 0), (1920, 1080, 1280, 0)]
PAUSED = "paused_need_help"

pytestmark = pytest.mark.timeout(240)


def test_a_click_whose_screen_goes_away_is_not_clicked_again(
        xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    display = xdisplay(MONITORS, window_manager=True)
    monkeypatch.setenv("DISPLAY", display)
    from agent.screen import geometry

    (second,) = [m.model_dump() for m in geometry.monitors_geometry() if m.idx == 1]
    # At the click, the second monitor is unplugged and the desktop shrinks to the first
    # (what the lock screen or a docking station does to a capture): nothing is drawn before.
    unplug = (f"DISPLAY={display} xrandr --delmonitor MON2 && "
              f"DISPLAY={display} xrandr --fb 1280x1024")
    target = Target(display, tmp_path, "Dossier patient", 1400, 100, on_click=unplug)
    try:
        system = System(spawn, lea_env, tmp_path,
                        extra_env={"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60"})
        effects = tmp_path / "effects.jsonl"
        spawn(python_argv("-m", "agent", "--machine-id", "ws1", "--executor", "desktop",
                          "--data-dir", str(tmp_path / "agent-data"), "--effects-log",
                          str(effects)),
              env={**system.env, "DISPLAY": display,
                   # The click changes nothing before the monitor goes: the agent keeps
                   # capturing until it does.
                   "LEA_DESKTOP_SCREEN_CHANGE_TIMEOUT_S": "20"}, name="agent-ws1")
        wait_until(lambda: any("dispatcher answered hello" in log.read_text(errors="replace")
                               for log in tmp_path.glob("agent-ws1-*.log")), timeout=90)
        x, y = target.button_centre()
        click = {"type": "click", "monitor_index": 1, "monitor_geometry": second,
                 "target_spec": {"x_pct": (x - second["x"]) / second["w"],
                                 "y_pct": (y - second["y"]) / second["h"]}}
        rid = system.start(workflow(click, {"type": "key_combo",
                                            "parameters": {"keys": ["ctrl", "s"]}}), "ws1")
        s = system.wait_status(rid, PAUSED, "completed", timeout=120)
        assert s.pause_reason == "failed_after_input", s
        (report,) = reports(system, rid)  # no s0_retry1
        assert report["error"].startswith("capture_failed"), report
        assert report["body"]["input_performed"] == "performed"
        assert len(target.events("click")) == 1
        lines = effects.read_text().splitlines()
        assert len(lines) == 1 and '"s0"' in lines[0]
    finally:
        target.close()
