"""A value read on a real screen, through the whole system: the tree, an agent started with
``--executor desktop`` (Tesseract) on an X display of two monitors, and a Tk stay form
(tests/fixtures/patient_banner.py) showing a stay number beside its label.

The number is read beside its label, or from a region of the second monitor (in fractions
of that monitor, not of the desktop), kept as the replay's output, and the step using it
is done; a number against the step's pattern pauses the replay (``output_invalid``) and
nothing is typed. (That the value reaches the typed text is the simulated system test's:
its agent reads its window back, tests/integration/test_outputs_system.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from messages.workflow import Workflow
from tests.conftest import Spawn
from tests.integration.desktop_record import Record, desktop_tree
from tests.integration.probes import reports
from tests.xdisplay import XDisplayFactory

MONITORS = [(1280, 1024, 0, 0), (1280, 1024, 1280, 0)]
SECOND = MONITORS[1]
SEJOUR = "2026-004217"
PATTERN = r"\d{4}-\d{6}"

pytestmark = pytest.mark.timeout(240)


def form(display: str, tmp: Path, value: str) -> Record:
    """The stay form on the second monitor: the number beside its label."""
    return Record(display, tmp, "N° de séjour :", SECOND[2] + 100, 120, value=value)


def letter(where: dict[str, Any]) -> Workflow:
    return Workflow.model_validate({"workflow_id": "letter", "actions": [
        {"action_id": "read", "type": "read_text", "monitor_index": 1,
         "parameters": {"output": "sejour", "pattern": PATTERN, **where}},
        {"action_id": "note", "type": "type", "monitor_index": 1,
         "parameters": {"text": "Sejour {{outputs.sejour}}"}}]})


@pytest.fixture
def desk(xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str],
         tmp_path: Path) -> Any:
    return desktop_tree(xdisplay, MONITORS, spawn, lea_env, tmp_path)


@pytest.mark.parametrize("how", ["label", "region"])
def test_the_stay_number_read_on_screen_is_the_replays_output(desk: Any, how: str) -> None:
    system, display, tmp = desk
    record = form(display, tmp, SEJOUR)
    try:
        where = ({"label": "N° de séjour"} if how == "label"
                 else {"region": record.region("value", SECOND)})
        rid = system.start(letter(where), "ws1")
        summary = system.wait_status(rid, "completed", "paused_need_help", timeout=150)
        assert summary.status == "completed", summary
        assert summary.outputs == {"sejour": SEJOUR}
    finally:
        record.close()


def test_a_number_against_the_pattern_pauses_and_nothing_is_typed(desk: Any) -> None:
    system, display, tmp = desk
    record = form(display, tmp, "2026-0042")
    try:
        rid = system.start(letter({"label": "N° de séjour"}), "ws1")
        summary = system.wait_status(rid, "paused_need_help", "completed", timeout=150)
        assert summary.pause_reason == "output_invalid", summary
        assert "2026-0042" in (summary.pause_message or ""), summary.pause_message
        (report,) = reports(system, rid)  # a business failure: never retried by itself
        assert report["body"]["output_value"] == "2026-0042"
        assert record.typed() == [] and summary.outputs == {}
    finally:
        record.close()
