"""The patient's identity read on a real screen, through the whole system: the tree, an
agent started with ``--executor desktop`` (Tesseract) on an X display, and a Tk patient
record (tests/fixtures/patient_banner.py) whose banner names a patient.

The banner of the run's patient lets the workflow type into the record; another patient's
banner pauses the replay (``identity_mismatch``) with what was read, and nothing is typed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from messages.replay import ReplayStarted, StartReplay
from messages.workflow import Workflow
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import reports
from tests.integration.system import System
from tests.xdisplay import XDisplayFactory

FORM = Path(__file__).resolve().parent.parent / "fixtures" / "patient_banner.py"
MONITORS = [(1280, 1024, 0, 0)]
IPP = "004217"

pytestmark = pytest.mark.timeout(240)


class Record:
    """The patient record on a display: its banner's box and what was typed into it."""

    def __init__(self, display: str, tmp: Path, banner: str) -> None:
        self.log = tmp / "typed.jsonl"
        self.proc = subprocess.Popen([sys.executable, str(FORM), banner, "100", "80",
                                      str(self.log)], env={**os.environ, "DISPLAY": display},
                                     stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.layout: dict[str, Any] = json.loads(self.proc.stdout.readline())

    def region(self) -> dict[str, float]:
        """The banner as a region of the monitor, with some margin (as an author draws it)."""
        x, y, w, h = self.layout["banner"]
        sw, sh = self.layout["screen"]
        return {"x_pct": max(0, x - 10) / sw, "y_pct": max(0, y - 10) / sh,
                "w_pct": (w + 20) / sw, "h_pct": (h + 20) / sh}

    def typed(self) -> list[str]:
        if not self.log.exists():
            return []
        return [json.loads(line)["text"] for line in self.log.read_text().splitlines()]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


def admission(region: dict[str, float]) -> Workflow:
    return Workflow.model_validate({"workflow_id": "admission", "inputs": [
        {"name": "ipp", "pattern": r"\d{6}", "sensitive": True},
        {"name": "note"}], "actions": [
        {"action_id": "identity", "type": "verify_screen", "monitor_index": 0,
         "parameters": {"expect_text": "IPP {{ipp}}", "region": region,
                        "identifier_pattern": r"\b\d{6}\b"}},
        {"action_id": "note", "type": "type", "monitor_index": 0,
         "parameters": {"text": "{{note}}"}}]})


@pytest.fixture
def desk(xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str],
         tmp_path: Path) -> Any:
    display = xdisplay(MONITORS, window_manager=True)
    system = System(spawn, lea_env, tmp_path, extra_env={
        "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60", "LEA_BEACON_TIMEOUT_S": "60",
        "LEA_HEARTBEAT_LIVENESS": "10", "RPA_LOOP_DETECTOR_ENABLED": "false"})
    spawn(python_argv("-m", "agent", "--machine-id", "ws1", "--executor", "desktop",
                      "--data-dir", str(tmp_path / "agent-data")),
          env={**system.env, "DISPLAY": display}, name="agent-ws1")
    wait_until(lambda: any("dispatcher answered hello" in log.read_text(errors="replace")
                           for log in tmp_path.glob("agent-ws1-*.log")), timeout=60)
    return system, display, tmp_path


def start(system: System, region: dict[str, float]) -> str:
    reply = system.call("dispatcher", StartReplay(
        workflow=admission(region), machine_id="ws1",
        inputs={"ipp": IPP, "note": "admission"}))
    assert isinstance(reply, ReplayStarted), reply
    return reply.replay_id


def test_the_patients_banner_lets_the_note_be_typed(desk: Any) -> None:
    system, display, tmp = desk
    record = Record(display, tmp, f"Patient DUPONT Jean   IPP {IPP}")
    try:
        rid = start(system, record.region())
        summary = system.wait_status(rid, "completed", "paused_need_help", timeout=150)
        assert summary.status == "completed", summary
        assert wait_until(lambda: "admission" in record.typed()), record.typed()
    finally:
        record.close()


def test_another_patients_banner_pauses_before_the_note(desk: Any) -> None:
    system, display, tmp = desk
    record = Record(display, tmp, "Patient MARTIN Paul   IPP 555555")
    try:
        rid = start(system, record.region())
        summary = system.wait_status(rid, "paused_need_help", "completed", timeout=150)
        assert summary.pause_reason == "identity_mismatch", summary
        assert "555555" in (summary.pause_message or "") and IPP not in summary.pause_message
        (report,) = reports(system, rid)  # no retry: the same screen reads the same
        assert report["body"]["target_description"] == "autre identifiant lu : 555555"
        assert record.typed() == []
    finally:
        record.close()
