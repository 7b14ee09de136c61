"""A workflow's inputs and the patient's identity check, through the whole system: the tree
(``python run.py``), a simulated agent process, the command line and the audit trail.

- the values given at start are what the agent types and looks for (its own screen check
  reads them back), and a sensitive one is in no log file, bus event nor audit record;
- values that do not satisfy the declaration are refused before any replay exists;
- a banner showing another patient's identifier pauses the replay (``identity_mismatch``)
  before the next input, and the audit trail says what was read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from messages.replay import (
    CancelReplay,
    GetReplayStatus,
    ReplayStarted,
    ReplayStatusReply,
    StartReplay,
)
from messages.workflow import Workflow
from tests.conftest import Spawn, wait_until
from tests.integration import trail_checks as trail
from tests.integration.probes import Tap
from tests.integration.system import System
from transport.client import CallFailed

MARKER = "739164"  # the sensitive IPP: nowhere but on the (simulated) screen
BANNER = {"x_pct": 0.0, "y_pct": 0.07, "w_pct": 1.0, "h_pct": 0.08}
IPP_PATTERN = r"\b\d{6}\b"
QUIET = {"RPA_LOOP_DETECTOR_ENABLED": "false"}

INPUTS = [
    {"name": "ipp", "pattern": r"\d{6}", "sensitive": True, "description": "IPP du patient"},
    {"name": "note", "description": "la note à saisir"},
    {"name": "champ", "description": "le champ de la note"},
]


def identity_step(action_id: str) -> dict[str, Any]:
    return {"action_id": action_id, "type": "verify_screen",
            "parameters": {"expect_text": "IPP {{ipp}}", "region": BANNER,
                           "identifier_pattern": IPP_PATTERN}}


def note_workflow() -> Workflow:
    return Workflow.model_validate({"workflow_id": "note", "inputs": INPUTS, "actions": [
        identity_step("identity"),
        {"action_id": "note", "type": "type", "target_spec": {"by_text": "{{champ}}"},
         "parameters": {"text": "{{note}}"}},
        {"action_id": "search", "type": "type", "target_spec": {"by_text": "Recherche"},
         "parameters": {"text": "IPP {{ipp}}"}},
        # The agent reads the window back: what it typed is what it was given.
        {"action_id": "typed_ipp", "type": "verify_screen",
         "parameters": {"expect_text": "Recherche IPP {{ipp}}"}},
        {"action_id": "typed_note", "type": "verify_screen",
         "parameters": {"expect_text": "{{note}}"}},
        # A target that holds the sensitive value and is not on screen: its reports and
        # the pause they end in name it.
        {"action_id": "open", "type": "click", "target_spec": {"by_text": "Dossier {{ipp}}"}},
    ]})


def scenario(banner: str) -> dict[str, Any]:
    return {"desktop": {"banner": banner}}


def start(system: System, wf: Workflow, machine: str, values: dict[str, str]) -> str:
    reply = system.call("dispatcher", StartReplay(workflow=wf, machine_id=machine,
                                                  inputs=values))
    assert isinstance(reply, ReplayStarted), reply
    return reply.replay_id


def replay_ids(system: System) -> list[str]:
    reply = system.call("dispatcher", GetReplayStatus())
    assert isinstance(reply, ReplayStatusReply)
    return [r.replay_id for r in reply.replays]


def trail_until(system: System, rid: str, kind: str) -> list[dict[str, Any]]:
    """The replay's audit records, once one of ``kind`` is in (they arrive on their own)."""
    def arrived() -> list[dict[str, Any]] | None:
        records = trail.show_json(system.env, rid)
        return records if any(r.get("kind") == kind for r in records) else None
    found = wait_until(arrived, timeout=30.0, interval=0.5)
    assert isinstance(found, list)
    return found


@pytest.fixture
def system(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> System:
    return System(spawn, lea_env, tmp_path, extra_env=QUIET)


def test_values_are_typed_and_a_sensitive_one_is_never_shown(
        system: System, tmp_path: Path) -> None:
    tap = Tap(system)
    agent = system.agent("ws1", scenario(f"Patient DUPONT Jean  IPP {MARKER}  né le 01/02/1950"))
    try:
        rid = start(system, note_workflow(), "ws1",
                    {"ipp": MARKER, "note": "Admission du jour", "champ": "Commentaire"})
        paused = system.wait_status(rid, "paused_need_help", "completed", "failed")
        # Every step up to the last went through: the identity matched, both values were
        # typed where the inputs said and read back by the agent.
        assert paused.status == "paused_need_help", paused
        assert paused.pause_reason == "target_not_found", paused
        assert paused.completed_actions == 5, paused
        assert agent.executed("note") == 1 and agent.executed("search") == 1
        # The pause names the target with the value masked.
        assert "Dossier •••" in (paused.pause_message or ""), paused.pause_message
        assert MARKER not in paused.model_dump_json()
        system.call("dispatcher", CancelReplay(replay_id=rid, operator="test"))
        system.wait_status(rid, "failed")
        records = trail_until(system, rid, "replay_cancelled")
        kinds = {r.get("kind") for r in records}
        assert "report_received" in kinds and "replay_paused" in kinds, kinds
        started = next(r for r in records if r.get("kind") == "replay_started")
        assert "•••" in json.dumps(started, ensure_ascii=False)
        assert "Admission du jour" in json.dumps(started, ensure_ascii=False)
        events = tap.events()
        assert any(e.topic == "lea:replay_paused" for e in events), [e.topic for e in events]
    finally:
        tap.close()
    assert MARKER not in json.dumps(records, ensure_ascii=False)
    leaked = [e.topic for e in events if MARKER in e.model_dump_json()]
    assert not leaked, leaked
    logs = [p for p in tmp_path.rglob("*.log") if p.is_file()]
    assert logs, "no log file to look into"
    assert not [p.name for p in logs if MARKER in p.read_text(errors="replace")]


def test_values_against_the_declaration_are_refused_before_any_replay(
        system: System, tmp_path: Path) -> None:
    agent = system.agent("ws1", scenario("IPP 739164"))
    wf = note_workflow()
    with pytest.raises(CallFailed) as refused:
        start(system, wf, "ws1", {"ipp": "12AB", "note": "x", "champ": "Commentaire"})
    assert refused.value.code == "invalid_inputs"
    problems = refused.value.detail["problems"]
    assert any(p.startswith("ipp: ") and "pattern" in p for p in problems), problems
    assert "12AB" not in json.dumps(problems)  # sensitive: not even in the refusal
    with pytest.raises(CallFailed) as missing:
        start(system, wf, "ws1", {"ipp": MARKER})
    assert any(p.startswith("note: required") for p in missing.value.detail["problems"])
    path = tmp_path / "note.json"
    path.write_text(wf.model_dump_json())
    done = trail.run_cli(system.env, "replay", "start", str(path), "--machine-id", "ws1",
                         "--input", f"ipp={MARKER}", "--input", "note=x",
                         "--input", "champ=Commentaire", "--input", "lit=12")
    assert done.returncode == 1, done
    assert "lit: not a declared input" in done.stderr, done.stderr
    assert replay_ids(system) == [] and agent.effects() == []


def test_another_patients_banner_pauses_before_any_input(system: System) -> None:
    agent = system.agent("ws1", scenario("Patient MARTIN Paul  IPP 555555"))
    rid = start(system, note_workflow(), "ws1",
                {"ipp": MARKER, "note": "Admission du jour", "champ": "Commentaire"})
    paused = system.wait_status(rid, "paused_need_help", "completed", "failed")
    assert paused.pause_reason == "identity_mismatch", paused
    message = paused.pause_message or ""
    assert "« IPP ••• »" in message and "555555" in message, message
    assert MARKER not in paused.model_dump_json()
    assert paused.completed_actions == 0
    assert agent.effects() == []  # nothing typed into the other patient's record
    reports = [r for r in trail_until(system, rid, "replay_paused")
               if r.get("kind") == "report_received"]
    said = [r["data"]["report"].get("target_description") for r in reports]
    assert "autre identifiant lu : 555555" in said, said
