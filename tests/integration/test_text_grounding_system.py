"""Text targets through the whole system, on a real two-monitor X display: broker, actors and
an agent started with ``--executor desktop`` (Tesseract), each its own process.

A Tk patient form (tests/fixtures/labelled_form.py) on monitor 1 (0-based: the second
screen, at x=1280) has been rearranged since the workflow was recorded: its buttons are
elsewhere. "Enregistrer" is clicked where it is now, never at the recorded position; a text
that is not there pauses the replay after the retries without any click; a text that is
there twice with nothing to tell the two apart pauses at once (``ambiguous_target``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import reports
from tests.integration.system import System, workflow
from tests.xdisplay import XDisplayFactory

MONITORS = [(1280, 1024, 0, 0), (1920, 1080, 1280, 0)]
FORM = Path(__file__).resolve().parent.parent / "fixtures" / "labelled_form.py"
PAUSED = "paused_need_help"

pytestmark = pytest.mark.timeout(240)


class Form:
    """The form on a display: its controls (Tk's own boxes) and the presses it logged."""

    def __init__(self, display: str, tmp: Path, layout: str, x: int, y: int) -> None:
        self.log = tmp / f"presses-{layout}.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, str(FORM), "fr", "DejaVu Sans", "100", layout, str(x), str(y),
             str(self.log)], env={**os.environ, "DISPLAY": display}, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.controls: list[dict[str, Any]] = json.loads(self.proc.stdout.readline())["controls"]

    def box(self, text: str) -> list[int]:
        return next(c["box"] for c in self.controls if c["text"] == text)

    def presses(self) -> list[str]:
        if not self.log.exists():
            return []
        return [json.loads(line)["text"] for line in self.log.read_text().splitlines()]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


def recorded_at(form: Form, text: str) -> dict[str, float]:
    """``x_pct / y_pct`` of the control's centre on monitor 1, as a recorder would keep it."""
    x, y, w, h = form.box(text)
    return {"x_pct": (x + w / 2 - 1280) / 1920, "y_pct": (y + h / 2) / 1080}


@pytest.fixture
def desk(xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str],
         tmp_path: Path) -> Any:
    display = xdisplay(MONITORS, window_manager=True)
    # A loaded 2-core machine starts the actors slowly; OCR steps take seconds there.
    system = System(spawn, lea_env, tmp_path, extra_env={
        "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60", "LEA_BEACON_TIMEOUT_S": "60",
        "LEA_HEARTBEAT_LIVENESS": "10"})
    # The recording: the form as it was; the replay meets it rearranged.
    before = Form(display, tmp_path, "recorded", 1580, 60)
    recorded = {c: recorded_at(before, c) for c in ("Enregistrer", "Supprimer", "OK")}
    before.close()
    form = Form(display, tmp_path, "moved", 1580, 60)
    spawn(python_argv("-m", "agent", "--machine-id", "ws1", "--executor", "desktop",
                      "--data-dir", str(tmp_path / "agent-data")),
          env={**system.env, "DISPLAY": display}, name="agent-ws1")
    wait_until(lambda: any("dispatcher answered hello" in log.read_text(errors="replace")
                           for log in tmp_path.glob("agent-ws1-*.log")), timeout=60)
    yield system, form, recorded
    form.close()


def test_enregistrer_is_clicked_where_it_is_now_on_monitor_1(desk: Any) -> None:
    system, form, recorded = desk
    step = {"type": "click", "monitor_index": 1,
            "target_spec": {"by_text": "Enregistrer", **recorded["Enregistrer"]}}
    rid = system.start(workflow(step), "ws1")
    system.wait_status(rid, "completed", timeout=120)
    assert wait_until(lambda: form.presses() == ["Enregistrer"]), form.presses()
    (report,) = reports(system, rid)
    body = report["body"]
    assert body["resolution_method"] == "ocr" and body["resolution_score"] >= 0.8
    x, y, w, h = form.box("Enregistrer")
    box = body["resolution_box"]
    assert x <= box["x"] and box["x"] + box["w"] <= x + w, (box, form.box("Enregistrer"))
    assert y <= box["y"] and box["y"] + box["h"] <= y + h
    assert x <= body["actual_position"]["x"] <= x + w


def test_absent_text_pauses_after_the_retries_and_clicks_nothing(desk: Any) -> None:
    system, form, recorded = desk
    # Recorded where "Supprimer" stood: a blind click there would delete.
    step = {"type": "click", "monitor_index": 1,
            "target_spec": {"by_text": "Valider la prescription", **recorded["Supprimer"]}}
    rid = system.start(workflow(step), "ws1")
    summary = system.wait_status(rid, PAUSED, "completed", timeout=180)
    assert summary.status == PAUSED and summary.pause_reason == "target_not_found", summary
    logged = reports(system, rid)
    assert len(logged) == 4  # the step and its three retries
    assert all(r["error"] == "target_not_found" and r["body"]["resolution_method"] == "ocr"
               for r in logged)
    assert "Valider la prescription" in (logged[-1]["body"]["target_description"] or "")
    assert form.presses() == []


def test_a_text_there_twice_pauses_at_once_for_a_person(desk: Any) -> None:
    system, form, _recorded = desk
    step = {"type": "click", "monitor_index": 1, "target_spec": {"by_text": "OK"}}
    rid = system.start(workflow(step), "ws1")
    summary = system.wait_status(rid, PAUSED, "completed", timeout=120)
    assert summary.status == PAUSED and summary.pause_reason == "ambiguous_target", summary
    (report,) = reports(system, rid)  # no retry: the same screen would answer the same
    assert report["error"] == "ambiguous_target"
    assert "OK" in (report["body"]["target_description"] or "")
    assert form.presses() == []
