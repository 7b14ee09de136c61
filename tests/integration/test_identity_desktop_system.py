"""The patient's identity read on a real screen, through the whole system: the tree, an
agent started with ``--executor desktop`` (Tesseract) on an X display, and a Tk patient
record (tests/fixtures/patient_banner.py) whose banner names a patient.

The banner of the run's patient lets the workflow type into the record; another patient's
banner pauses the replay (``identity_mismatch``) with what was read, and nothing is typed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from messages.replay import ReplayStarted, StartReplay
from messages.workflow import Workflow
from tests.conftest import Spawn, wait_until
from tests.integration.desktop_record import Record, desktop_tree
from tests.integration.probes import reports
from tests.integration.system import System
from tests.xdisplay import XDisplayFactory

MONITORS = [(1280, 1024, 0, 0)]
IPP = "004217"

pytestmark = pytest.mark.timeout(240)


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
    return desktop_tree(xdisplay, MONITORS, spawn, lea_env, tmp_path)


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
