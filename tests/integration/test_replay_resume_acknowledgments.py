"""Resuming a safety pause through the real command (docs/architecture.md).

The whole tree, a simulated agent, the example workflow (a medical_critical pause with two
required checks) and Léa's model answering from a real HTTP server: `python run.py replay
resume` is refused while a required check is missing or an id is not a check of this
pause, and once accepted the acknowledged ids, the operator and the time are stored with
the replay and in the audit trail.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.ollama_stub import OllamaStub
from cli.workflow_cmd import load_workflow
from tests.conftest import Spawn, wait_until
from tests.integration.probes import cli, ready_agent
from tests.integration.system import System, clicks, workflow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "admission_note.json"
PAUSED = "paused_need_help"


@pytest.fixture
def paused(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path
           ) -> Iterator[tuple[System, str]]:
    with OllamaStub("good") as stub:
        system = System(spawn, lea_env, tmp_path, {"OLLAMA_URL": stub.url})
        ready_agent(system, "M1")
        rid = system.start(load_workflow(EXAMPLE), "M1")
        system.wait_status(rid, PAUSED)
        yield system, rid


def resume(system: System, rid: str, *ids: str) -> subprocess.CompletedProcess[str]:
    acks = [arg for i in ids for arg in ("--ack", i)]
    return cli(system, "replay", "resume", rid, *acks, "--operator", "Dr Martin", "--json")


def test_resume_is_refused_while_a_required_check_is_missing(
        paused: tuple[System, str]) -> None:
    system, rid = paused
    refused = resume(system, rid, "chk_identity", "llm_1")
    assert refused.returncode != 0
    answer = json.loads(refused.stdout)
    assert answer["error"] == "required_checks_missing"
    assert answer["detail"]["missing"] == ["chk_note"]
    s = system.status(rid)
    assert s.status == PAUSED and s.pause_reason == "user_request"  # nothing changed


def test_an_id_that_is_no_check_of_this_pause_never_passes(paused: tuple[System, str]) -> None:
    system, rid = paused
    refused = resume(system, rid, "chk_identity", "chk_note", "chk_forged")
    assert refused.returncode != 0
    assert json.loads(refused.stdout)["error"] == "unknown_check_ids"
    assert system.status(rid).status == PAUSED


def test_acknowledged_ids_operator_and_time_are_stored_and_audited(
        paused: tuple[System, str]) -> None:
    system, rid = paused
    accepted = resume(system, rid, "chk_identity", "chk_note", "llm_2")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert json.loads(accepted.stdout)["status"] == "resumed"
    done = system.wait_status(rid, "completed")
    stored = done.checks_acknowledged
    assert stored is not None and stored["ids"] == ["chk_identity", "chk_note", "llm_2"]
    assert stored["operator"] == "Dr Martin" and isinstance(stored["at"], float)

    def resumed_record() -> dict[str, object] | None:
        shown = cli(system, "audit", "show", rid, "--json")
        if shown.returncode != 0:
            return None
        records = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
        return next((r for r in records if r.get("kind") == "replay_resumed"), None)

    record = wait_until(resumed_record, timeout=30)
    assert isinstance(record, dict)
    data = record["data"]
    assert isinstance(data, dict)
    assert data["acknowledged_check_ids"] == ["chk_identity", "chk_note", "llm_2"]
    assert data["operator"] == "Dr Martin" and isinstance(record["at"], float)


def test_a_pause_without_the_new_fields_behaves_as_before(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    """Backward compatibility: a plain pause_for_human pauses with its message and no
    checks, resumes with no acknowledgement, and is skipped in autonomous mode; no request
    reaches the model (nothing is medical_critical)."""
    with OllamaStub("good") as stub:
        system = System(spawn, lea_env, tmp_path, {"OLLAMA_URL": stub.url})
        ready_agent(system, "M1")
        plain = {"type": "pause_for_human", "parameters": {"message": "Appelez le médecin"}}
        wf = workflow(*clicks(1), plain, *clicks(1))
        rid = system.start(wf, "M1")
        s = system.wait_status(rid, PAUSED)
        assert (s.pause_reason, s.pause_message, s.safety_checks) == (
            "user_request", "Appelez le médecin", [])
        assert resume(system, rid).returncode == 0
        assert system.wait_status(rid, "completed").completed_actions == 3
        auto = system.start(wf, "M1", mode="autonomous")
        done = system.wait_status(auto, "completed")
        assert done.counters.get("skipped") == 1 and done.counters.get("pauses", 0) == 0
        assert stub.received() == []
