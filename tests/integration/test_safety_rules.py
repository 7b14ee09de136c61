"""Safety rules (docs/screens-and-pauses.md) through the real tree and the real command line: a
named person acknowledges required checks (``operator_required``), a ``medical_critical`` pause
always stops for a person (autonomous mode included), ``failed`` means a replay a person ended at a
pause a failure caused, and a setting the tree cannot honour stops it at start."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from cli.ollama_stub import OllamaStub
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import cli, ready_agent
from tests.integration.system import System, clicks, workflow

ROOT = Path(__file__).resolve().parents[2]
PAUSED = "paused_need_help"
CRITICAL = {"type": "pause_for_human", "parameters": {
    "message": "Avant l'envoi de la prescription", "safety_level": "medical_critical"}}


def audit_records(system: System, rid: str) -> list[dict[str, object]]:
    shown = cli(system, "audit", "show", rid, "--json")
    if shown.returncode != 0:
        return []
    return [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]


def test_required_checks_are_acknowledged_by_a_named_person_in_every_mode(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    """Autonomous mode, a medical_critical pause declaring no check: the replay pauses with a
    required system check; `replay resume --ack` without --operator is refused
    operator_required and changes nothing; with it, the name and the check go to the trail."""
    with OllamaStub("good") as stub:
        system = System(spawn, lea_env, tmp_path, {"OLLAMA_URL": stub.url})
        ready_agent(system, "M1")
        rid = system.start(workflow(*clicks(1), CRITICAL, *clicks(1)), "M1", mode="autonomous")
        s = system.wait_status(rid, PAUSED)
        assert s.completed_actions == 1 and s.counters.get("skipped", 0) == 0
        first = s.safety_checks[0]
        assert (first.id, first.source, first.required) == ("confirm_step", "system", True)
        assert all(not c.required for c in s.safety_checks[1:])  # Léa's suggestions

        refused = cli(system, "replay", "resume", rid, "--ack", "confirm_step", "--json")
        assert refused.returncode == 1
        assert json.loads(refused.stdout.splitlines()[0])["error"] == "operator_required"
        assert "operator_required" in refused.stderr
        assert system.status(rid).status == PAUSED

        accepted = cli(system, "replay", "resume", rid, "--ack", "confirm_step",
                       "--operator", "Dr Martin")
        assert accepted.returncode == 0, accepted.stderr
        system.wait_status(rid, "completed")

        def resumed() -> dict[str, object] | None:
            return next((r for r in audit_records(system, rid)
                         if r.get("kind") == "replay_resumed"), None)

        record = wait_until(resumed, timeout=30)
        assert isinstance(record, dict) and isinstance(record["data"], dict)
        assert record["data"]["operator"] == "Dr Martin"
        assert record["data"]["acknowledged_check_ids"] == ["confirm_step"]


def test_cancelled_at_a_failure_pause_is_failed(spawn: Spawn, lea_env: dict[str, str],
                                               tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path)
    ready_agent(system, "M1", scenario={"actions": {"s1": {"system_dialog": "uac_consent"}}})
    rid = system.start(workflow(*clicks(3)), "M1")
    assert system.wait_status(rid, PAUSED).pause_reason == "system_dialog"
    cancelled = cli(system, "replay", "cancel", rid, "--operator", "Dr Martin")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"failed {rid}")
    assert system.status(rid).status == "failed"
    status = cli(system, "replay", "status", rid, "--json")
    assert json.loads(status.stdout)["replays"][0]["status"] == "failed"

    ready_agent(system, "M2")  # M1's screen is still covered by the dialog
    running = system.start(workflow(*clicks(1), {"type": "wait",
                                                  "parameters": {"duration_ms": 60_000}}), "M2")
    system.wait_status(running, "running", where=lambda s: s.completed_actions == 1)
    assert cli(system, "replay", "cancel", running).stdout.startswith(f"cancelled {running}")
    assert system.status(running).status == "cancelled"


def test_a_setting_the_tree_cannot_honour_stops_it_at_start(lea_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    for name, value, says in [
            ("RPA_WATCHDOG_REPUSH_POSITION", "tail", "'tail' is not supported"),
            ("RPA_SAFETY_CHECKS_LLM_TIMEOUT_S", "soon", "valid number")]:
        env = {**lea_env, "LEA_DATA_DIR": str(tmp_path), name: value}
        done = subprocess.run(python_argv("run.py", "up"), env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, (name, done.stderr)
        assert f"error: setting {name}" in done.stderr and says in done.stderr, done.stderr


def test_after_an_input_the_expected_window_is_checked(spawn: Spawn, lea_env: dict[str, str],
                                                       tmp_path: Path) -> None:
    """A click that should bring up « Prescription » brings up another window: the step
    is done (never clicked twice), and the replay pauses wrong_window before the next."""
    system = System(spawn, lea_env, tmp_path)
    desktop = {"window_title": "Dossier patient", "widgets": [
        {"name": "Ordonnance", "kind": "button", "x": 0.1, "y": 0.1, "w": 0.2, "h": 0.1,
         "opens": "Ordonnance — Easily"},
        {"name": "Courrier", "kind": "button", "x": 0.5, "y": 0.1, "w": 0.2, "h": 0.1,
         "opens": "Courrier — Easily"}]}
    agent = ready_agent(system, "M1", scenario={"desktop": desktop})
    rid = system.start(workflow(
        {"type": "click", "target_spec": {"x_pct": 0.2, "y_pct": 0.15},
         "expected_window_title": "Ordonnance"},
        {"type": "click", "target_spec": {"x_pct": 0.6, "y_pct": 0.15},
         "expected_window_title": "Prescription"},
        *clicks(1)), "M1")
    s = system.wait_status(rid, PAUSED)
    assert (s.pause_reason, s.completed_actions) == ("wrong_window", 2)
    assert s.pause_message is not None and "Prescription" in s.pause_message
    assert agent.executed("s1") == 1 and agent.executed("s2") == 0
    assert cli(system, "replay", "resume", rid).returncode == 0
    system.wait_status(rid, "completed")
    assert agent.executed("s1") == 1


def test_workflow_check_refuses_a_click_it_cannot_locate(tmp_path: Path) -> None:
    path = tmp_path / "wf.json"
    path.write_text(json.dumps({"workflow_id": "wf", "actions": [
        {"action_id": "open", "type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.5}},
        {"action_id": "blind", "type": "double_click", "target_spec": {"x_pct": 0.5}},
        {"action_id": "typed", "type": "type", "parameters": {"text": "x"}},
        {"action_id": "nowhere", "type": "click"}]}))
    done = subprocess.run(python_argv("run.py", "workflow", "check", str(path)), cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "blind: a double_click with no way to locate its target" in done.stderr
    assert "nowhere: a click with no way" in done.stderr
    assert "open:" not in done.stderr and "typed:" not in done.stderr


def test_a_critical_pause_without_a_screenshot_gets_a_fresh_capture(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    """The pause is the first step: no earlier step left a screenshot. The dispatcher asks
    the agent for one, and the model is asked with it (before: no request, no_screenshot)."""
    with OllamaStub("good") as stub:
        system = System(spawn, lea_env, tmp_path, {"OLLAMA_URL": stub.url})
        ready_agent(system, "M1")
        rid = system.start(workflow(CRITICAL, *clicks(1)), "M1")
        s = system.wait_status(rid, PAUSED)
        (sent,) = stub.received()
        assert base64.b64decode(sent["images"][0]).startswith(b"\x89PNG")  # the agent's
        assert [c.source for c in s.safety_checks] == ["system", "llm_contextual",
                                                       "llm_contextual"]
