"""Workflow inputs (messages/inputs.py, workflow/inputs.py) and the identity verdict
(workflow/identity.py): declarations, placeholders, values, masking."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from messages.dispatch import ActionReport
from messages.workflow import Workflow
from tests.conftest import ROOT, python_argv
from workflow.identity import IdentityCheck, IdentitySpecError, identity_check, verdict
from workflow.inputs import mask_model, secrets, substitute, unused, value_problems

INPUTS = [{"name": "ipp", "pattern": r"\d{6}", "sensitive": True},
          {"name": "note", "required": False}, {"name": "jour", "type": "date"}]


def wf(*actions: dict[str, Any], inputs: list[dict[str, Any]] | None = None) -> Workflow:
    return Workflow.model_validate({"workflow_id": "w", "inputs": INPUTS if inputs is None
                                    else inputs, "actions": list(actions)})


TYPE_IPP = {"action_id": "a", "type": "type", "target_spec": {"by_text": "IPP {{ipp}}"},
            "parameters": {"text": "{{ipp}} le {{ jour }}, {{note}}"},
            "expected_window_title": "Dossier {{ipp}}"}


def test_an_undeclared_placeholder_is_refused_naming_the_action_and_field() -> None:
    with pytest.raises(ValidationError) as exc:
        wf({"action_id": "pause", "type": "pause_for_human",
            "parameters": {"message": "Vérifiez {{nom}}"}})
    assert "actions[0].parameters.message (action_id 'pause'): {{nom}} is not a declared" \
        in str(exc.value)


def test_values_are_checked_against_the_declaration_a_sensitive_one_never_shown() -> None:
    declared = wf(TYPE_IPP).inputs
    assert value_problems(declared, {"ipp": "004217", "jour": "2026-12-02"}) == []
    problems = value_problems(declared, {"ipp": "42X", "jour": "02/12/2026", "lit": "3"})
    assert problems == ["lit: not a declared input",
                        "ipp: ••• does not match the pattern '\\\\d{6}'",
                        "jour: '02/12/2026' is not a date (YYYY-MM-DD)"]
    assert value_problems(declared, {}) == ["ipp: required, not given",
                                            "jour: required, not given"]


def test_substitution_fills_every_template_field_and_keeps_the_ids() -> None:
    action = wf(TYPE_IPP).actions[0]
    done = substitute(action, {"ipp": "004217", "jour": "2026-12-02"})
    assert done.parameters["text"] == "004217 le 2026-12-02, "
    assert done.target_spec is not None and done.target_spec.by_text == "IPP 004217"
    assert done.expected_window_title == "Dossier 004217" and done.action_id == "a"
    assert action.parameters["text"].startswith("{{ipp}}")  # the workflow's is untouched


def test_an_input_used_nowhere_is_reported() -> None:
    assert unused(wf(TYPE_IPP)) == []
    assert unused(wf({"action_id": "a", "type": "wait", "parameters": {"duration_ms": 1}},
                     inputs=[{"name": "ipp"}])) == ["ipp"]


def test_a_report_holding_a_sensitive_value_is_masked() -> None:
    hidden = secrets(wf(TYPE_IPP).inputs, {"ipp": "004217", "note": "004217 ok"})
    assert hidden == ["004217"]
    report = ActionReport(replay_id="r", session_id="s", machine_id="m", action_id="a",
                          attempt_id="t", success=False, target_description="IPP 004217",
                          target_spec={"by_text": "IPP 004217"}, screenshot_after=b"004217")
    masked = mask_model(report, hidden)
    assert masked.target_description == "IPP •••"
    assert masked.target_spec is not None and masked.target_spec.by_text == "IPP •••"
    assert masked.screenshot_after == b"004217"


def check(expect: str, pattern: str | None = r"\b\d{6}\b") -> IdentityCheck:
    return IdentityCheck(expect, re.compile(pattern) if pattern else None, None)


def test_the_identity_verdict() -> None:
    assert verdict(check("IPP 004217"), "Patient DUPONT  ipp 004217") is None
    assert verdict(check("IPP 004217"), "Patient MARTIN IPP 555555") == \
        "autre identifiant lu : 555555"
    # Ours and another one: whose record it is cannot be told.
    assert verdict(check("IPP 004217"), "IPP 004217 / IPP 555555") == \
        "autre identifiant lu : 555555"
    assert verdict(check("IPP 004217", None), "Patient MARTIN") == "« Patient MARTIN »"
    assert verdict(check("IPP 004217"), "") == "aucun texte"


def test_identity_parameters_are_checked() -> None:
    assert identity_check({}) is None
    for bad in ({"expect_text": ""}, {"expect_text": "x", "identifier_pattern": "("},
                {"expect_text": "x", "region": {"x_pct": 0.5, "y_pct": 0, "w_pct": 0.8,
                                                "h_pct": 0.1}}):
        with pytest.raises(IdentitySpecError):
            identity_check(bad)


def test_workflow_check_refuses_undeclared_and_warns_of_unused(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(wf(TYPE_IPP, inputs=[*INPUTS, {"name": "lit"}]).model_dump_json())
    done = subprocess.run(python_argv("run.py", "workflow", "check", str(path)), cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "warning: input 'lit' is declared but used by no action" in done.stderr
    path.write_text(path.read_text().replace('{{note}}', '{{nome}}'))
    done = subprocess.run(python_argv("run.py", "workflow", "check", str(path)), cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "{{nome}} is not a declared input" in done.stderr
