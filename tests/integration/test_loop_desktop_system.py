"""A stuck desktop agent among a ticking clock is paused; the same workflow that works is not.

The whole tree (broker, dispatcher, loop detector...) and an agent started with
``--executor desktop`` on a real X display, with an analog xclock ticking every second
beside a Tk form (bench/loop_real/form_app.py, the form the real loop set was recorded
on). The workflow clicks a button, then types. When the button does nothing (``Valider``)
the typing goes nowhere and the screen changes only where the clock is: the replay pauses
``loop_detected`` within N=4 captures, its message naming the signal and what it saw.
When the button opens a dialog (``Ouvrir la fiche``) the typing fills it: the replay
completes without a pause.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.loop_detector.config import LoopConfig
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.system import System, workflow
from tests.xdisplay import XDisplayFactory

ROOT = Path(__file__).resolve().parents[2]
W, H = 1920, 1080
VALIDATE, OPEN = (198, 415), (436, 415)  # the form's buttons with its top-left at (120, 120)
PAUSED = "paused_need_help"
N = LoopConfig().screen_static_n

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(shutil.which("xclock") is None,
                                 reason="xclock missing (Debian x11-apps, scripts/test)")]


class Desk:
    def __init__(self, xdisplay: XDisplayFactory, spawn: Spawn, env: dict[str, str],
                 tmp: Path) -> None:
        self.display = xdisplay([(W, H, 0, 0)], window_manager=True)
        denv = {**env, "DISPLAY": self.display}
        self.state = tmp / "form.json"
        self.procs = [
            subprocess.Popen(["xclock", "-update", "1", "-geometry", "220x220+740+140"],
                             env=denv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            subprocess.Popen([sys.executable, str(ROOT / "bench" / "loop_real" / "form_app.py"),
                              str(self.state), "--x", "120", "--y", "120"], env=denv)]
        wait_until(self.state.exists, timeout=20)
        # On a busy machine the actors take seconds to import, and an action (its capture,
        # its poll of the screen) seconds to report: patience, as test_desktop_system.py
        # (the watchdog's 3 s orphan timeout would pause a slow step, not a stuck one).
        self.system = System(spawn, env, tmp, extra_env={"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60",
                                                         "LEA_BEACON_TIMEOUT_S": "30"},
                             ready_timeout=120)
        spawn(python_argv("-m", "agent", "--machine-id", "ws1", "--executor", "desktop",
                          "--data-dir", str(tmp / "agent-data"),
                          "--effects-log", str(tmp / "effects.jsonl")),
              env={**self.system.env, "DISPLAY": self.display}, name="agent-ws1")
        wait_until(lambda: any("dispatcher answered hello" in log.read_text(errors="replace")
                               for log in tmp.glob("agent-ws1-*.log")), timeout=60)

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait(5)


@pytest.fixture
def desk(xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str],
         tmp_path: Path) -> Iterator[Desk]:
    d = Desk(xdisplay, spawn, lea_env, tmp_path)
    yield d
    d.close()


def click_then_type(button: tuple[int, int]) -> list[dict[str, Any]]:
    at = {"target_spec": {"x_pct": button[0] / W, "y_pct": button[1] / H}}
    return [{"type": "click", **at}, {"type": "type", "parameters": {"text": "RAS"}},
            {"type": "type", "parameters": {"text": " ok"}},
            {"type": "type", "parameters": {"text": " 12"}},
            {"type": "key_combo", "parameters": {"keys": ["backspace"]}},
            {"type": "type", "parameters": {"text": "3"}}]


def test_a_button_that_does_nothing_beside_a_clock_pauses(desk: Desk) -> None:
    rid = desk.system.start(workflow(*click_then_type(VALIDATE)), "ws1")
    s = desk.system.wait_status(rid, PAUSED, "completed", timeout=90)
    assert s.status == PAUSED and s.pause_reason == "loop_detected", (
        s.pause_reason, s.pause_message, s)
    assert s.pause_message is not None
    assert s.pause_message.startswith("Léa semble bloquée — screen_static ("), s.pause_message
    assert "changed_at_site=0" in s.pause_message and "ignored_tiles=" in s.pause_message
    assert s.index <= N  # paused on the verdict of the N-th capture at the latest
    assert s.queue_length > 0


def test_the_same_workflow_whose_click_opens_a_dialog_completes(desk: Desk) -> None:
    rid = desk.system.start(workflow(*click_then_type(OPEN)), "ws1")
    s = desk.system.wait_status(rid, "completed", PAUSED, timeout=90)
    assert (s.status, s.counters.get("pauses", 0)) == ("completed", 0), (
        s.pause_reason, s.pause_message, s)
    assert '"dialog_text": "RAS ok 13"' in desk.state.read_text()
