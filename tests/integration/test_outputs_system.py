"""Outputs through the whole system: the tree (``python run.py``), a simulated agent process
whose screen shows a stay number beside its label, the dispatcher's store (SQLite, then
PostgreSQL) and the audit trail (docs/protocol.md, "Outputs").

- the value read is kept as the replay's output, typed by a later step (the agent reads its
  window back), shown by ``replay status`` and recorded by the audit trail; a kill -9 of
  the dispatcher between the reading and the typing loses nothing and types once;
- a sensitive output is typed, and in no log file, bus event nor audit record;
- a value against the step's pattern pauses the replay (``output_invalid``) before anything
  is typed from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from messages.workflow import Workflow
from tests.conftest import Spawn, wait_until
from tests.integration import trail_checks as trail
from tests.integration.probes import Tap
from tests.integration.system import System

SEJOUR = "2026-004217"
QUIET = {"RPA_LOOP_DETECTOR_ENABLED": "false"}


def letter(sensitive: bool = False) -> Workflow:
    return Workflow.model_validate({"workflow_id": "letter", "actions": [
        {"action_id": "read", "type": "read_text",
         "parameters": {"output": "sejour", "label": "N° de séjour",
                        "pattern": r"\d{4}-\d{6}", "sensitive": sensitive}},
        {"action_id": "note", "type": "type", "target_spec": {"by_text": "Commentaire"},
         "parameters": {"text": "Séjour {{outputs.sejour}}"}},
        # The agent reads its window back: what it typed is what it read.
        {"action_id": "typed", "type": "verify_screen",
         "parameters": {"expect_text": "Commentaire Séjour {{outputs.sejour}}"}}]})


def screen(sejour: str, **note: Any) -> dict[str, Any]:
    return {"desktop": {"banner": f"DUPONT Jean   N° de séjour : {sejour}   Lit 12"},
            "actions": {"note": note} if note else {}}


def trail_until(system: System, rid: str, kind: str) -> list[dict[str, Any]]:
    """The replay's audit records, once one of ``kind`` is in (they arrive on their own)."""
    def arrived() -> list[dict[str, Any]] | None:
        records = trail.show_json(system.env, rid)
        return records if any(r.get("kind") == kind for r in records) else None
    found = wait_until(arrived, timeout=30.0, interval=0.5)
    assert isinstance(found, list)
    return found


@pytest.fixture(params=["sqlite", "postgresql"])
def system(request: pytest.FixtureRequest, spawn: Spawn, lea_env: dict[str, str],
           tmp_path: Path) -> System:
    extra = dict(QUIET)
    if request.param == "postgresql":
        extra["LEA_DATABASE_URL"] = request.getfixturevalue("pg_url")
    return System(spawn, lea_env, tmp_path, extra_env=extra)


def test_a_value_read_survives_a_dispatcher_kill_and_is_typed_once(system: System) -> None:
    agent = system.agent("ws1", screen(SEJOUR, delay_s=3.0))
    rid = system.start(letter(), "ws1")

    def typing_with_the_value() -> bool:
        s = system.status(rid)
        return s.current_action_id == "note" and s.outputs == {"sejour": SEJOUR}

    wait_until(typing_with_the_value, timeout=60.0, interval=0.1)
    system.kill("dispatcher")  # its state is in the store: the value too
    done = system.wait_status(rid, "completed", "paused_need_help", "failed", timeout=90)
    assert done.status == "completed", done
    assert done.outputs == {"sejour": SEJOUR}
    assert agent.executed("note") == 1
    status = trail.run_cli(system.env, "replay", "status", rid)
    assert f"output sejour = {SEJOUR}" in status.stdout, status.stdout
    (read,) = [r for r in trail_until(system, rid, "replay_completed")
               if r.get("kind") == "output_read"]
    assert (read["data"]["output"], read["data"]["value"]) == ("sejour", SEJOUR)


def test_a_sensitive_value_is_typed_and_shown_nowhere(system: System, tmp_path: Path) -> None:
    tap = Tap(system)
    try:
        agent = system.agent("ws1", screen(SEJOUR))
        rid = system.start(letter(sensitive=True), "ws1")
        done = system.wait_status(rid, "completed", "paused_need_help", "failed")
        assert done.status == "completed", done
        assert agent.executed("note") == 1
        assert done.outputs == {"sejour": "•••"}
        records = trail_until(system, rid, "replay_completed")
        assert any(r.get("kind") == "output_read" for r in records)
        events = tap.events()
        assert any(e.topic == "lea:output_read" for e in events), [e.topic for e in events]
    finally:
        tap.close()
    assert SEJOUR not in json.dumps(records, ensure_ascii=False)
    leaked = [e.topic for e in events if SEJOUR in e.model_dump_json()]
    assert not leaked, leaked
    logs = [p for p in tmp_path.rglob("*.log") if p.is_file()]
    assert logs, "no log file to look into"
    assert not [p.name for p in logs if SEJOUR in p.read_text(errors="replace")]


def test_a_value_against_the_pattern_pauses_before_anything_is_typed(system: System) -> None:
    agent = system.agent("ws1", screen("2026-42"))
    rid = system.start(letter(), "ws1")
    paused = system.wait_status(rid, "paused_need_help", "completed", "failed")
    assert paused.pause_reason == "output_invalid", paused
    assert "2026-42" in (paused.pause_message or ""), paused.pause_message
    assert paused.outputs == {} and paused.completed_actions == 0
    assert agent.effects() == []
    reports = [r for r in trail_until(system, rid, "replay_paused")
               if r.get("kind") == "report_received"]
    assert [r["data"]["report"]["output_value"] for r in reports] == ["2026-42"]
