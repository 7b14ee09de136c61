"""A medical_critical pause end to end: the whole tree (``python run.py``), a simulated agent,
the example workflow, Léa's model a real HTTP server answering like Ollama; what the person
sees with ``python run.py replay status`` (the step the pause is at included), and which
screen the model judges after a person's work (docs/screens-and-pauses.md)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.ollama_stub import GOOD_CHECKS, OllamaStub
from cli.workflow_cmd import load_workflow
from tests.conftest import Spawn, free_port
from tests.integration.probes import cli, ready_agent, reports
from tests.integration.system import System, workflow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "admission_note.json"
PAUSED = "paused_need_help"
CRITICAL = {"type": "pause_for_human", "intention": "Contrôle avant enregistrement",
            "parameters": {"message": "Vérifiez le dossier.", "safety_level": "medical_critical",
                           "safety_checks": [{"id": "chk", "label": "Dossier vérifié"}]}}


@pytest.fixture
def stub() -> Iterator[OllamaStub]:
    with OllamaStub("good") as server:
        yield server


def test_status_shows_the_message_the_reason_and_every_check(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, stub: OllamaStub) -> None:
    system = System(spawn, lea_env, tmp_path, {"OLLAMA_URL": stub.url})
    ready_agent(system, "M1")
    rid = system.start(load_workflow(EXAMPLE), "M1")
    s = system.wait_status(rid, PAUSED)
    assert [(c.id, c.source, c.required) for c in s.safety_checks] == [
        ("chk_identity", "declarative", True), ("chk_note", "declarative", True),
        ("llm_1", "llm_contextual", False), ("llm_2", "llm_contextual", False)]
    (sent,) = stub.received()
    assert base64.b64decode(sent["images"][0]).startswith(b"\x89PNG")  # the agent's screen

    shown = cli(system, "replay", "status", rid)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "paused: user_request" in out
    assert "at step step_check_patient: Contrôle humain avant enregistrement" in out
    assert "Vérifiez l'identité du patient et la note avant l'enregistrement." in out
    assert "checks to acknowledge (2 required of 4)" in out
    assert ("chk_identity  REQUIRED  [workflow]  Nom, prénom et date de naissance du patient "
            "vérifiés") in out
    for i, check in enumerate(GOOD_CHECKS, start=1):
        assert f"llm_{i}         optional  [Léa, suggestion]  {check['label']}" in out
        assert f"Léa saw: {check['evidence']}" in out
    assert f"replay resume {rid} --ack chk_identity --ack chk_note" in out
    shown = cli(system, "replay", "status", rid, "--json")
    (replay,) = json.loads(shown.stdout)["replays"]
    assert (replay["pause_action_id"], replay["pause_intention"]) == (
        "step_check_patient", "Contrôle humain avant enregistrement")


@pytest.mark.long  # closed mode is in CI at the actor level (test_safety_checks_actor.py)
def test_no_model_fail_closed_the_person_is_told(spawn: Spawn, lea_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    """Nothing listens at OLLAMA_URL and the fail mode is closed: the pause still happens,
    with a required check saying the screen was not looked at."""
    system = System(spawn, lea_env, tmp_path, {
        "OLLAMA_URL": f"http://127.0.0.1:{free_port()}",
        "RPA_SAFETY_CHECKS_LLM_FAIL_MODE": "closed"})
    ready_agent(system, "M1")
    rid = system.start(load_workflow(EXAMPLE), "M1")
    s = system.wait_status(rid, PAUSED)
    assert [(c.id, c.source, c.required) for c in s.safety_checks][-1] == (
        "llm_unavailable", "system", True)
    out = cli(system, "replay", "status", rid).stdout
    assert "llm_unavailable  REQUIRED  [system]" in out and "why: unreachable" in out


def _shot(system: System, replay_id: str, action_id: str) -> str:
    """The sha256 of the screenshot the step's accepted report came with (the reports log
    keeps its hash)."""
    (report,) = [r for r in reports(system, replay_id)
                 if r["action_id"] == action_id and r["status"] == "accepted"]
    return str(report["body"]["screenshot_after"]["sha256"])


def test_after_a_resume_the_model_judges_the_screen_as_it_is_now(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, stub: OllamaStub) -> None:
    """A step leaves a screenshot, the replay pauses, the screen changes during the pause
    (another replay on the workstation stands in for the person), the replay is resumed
    and reaches a medical_critical pause: the model gets the screen as it is after the
    resume, not the step's screenshot from before the pause."""
    system = System(spawn, lea_env, tmp_path, {"OLLAMA_URL": stub.url})
    ready_agent(system, "M1")
    rid = system.start(workflow(
        {"type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.6}},
        {"type": "pause_for_human", "parameters": {"message": "Faites la saisie."}},
        CRITICAL), "M1")
    system.wait_status(rid, PAUSED, where=lambda s: s.pause_action_id == "s1")
    assert stub.received() == []  # a standard pause asks no model
    before = _shot(system, rid, "s0")

    other = system.start(workflow(  # the centre of the simulated window's « Imagerie »
        {"type": "click", "target_spec": {"x_pct": 0.15, "y_pct": 0.2}}), "M1")
    system.wait_status(other, "completed")
    now = _shot(system, other, "s0")
    assert now != before

    resumed = cli(system, "replay", "resume", rid, "--operator", "Dr Martin")
    assert resumed.returncode == 0, resumed.stderr
    s = system.wait_status(rid, PAUSED, where=lambda s: s.pause_action_id == "s2")
    assert s.pause_intention == "Contrôle avant enregistrement"
    (sent,) = stub.received()
    judged = hashlib.sha256(base64.b64decode(sent["images"][0])).hexdigest()
    assert judged != before, "the model judged the screen from before the pause"
    assert judged == now  # the simulated screen, unchanged since the other replay's click
