"""The DSL's optional ``safety_level`` / ``safety_checks`` of pause_for_human
(docs/screens-and-pauses.md):
the spec's shape is accepted, anything a checklist would have to guess is refused with a
message naming the step, and a workflow without them is exactly what it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from cli.workflow_cmd import load_workflow
from messages.workflow import Workflow, pause_safety_problems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def workflow(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"workflow_id": "wf", "actions": [
        {"action_id": "s1", "type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.5}},
        {"action_id": "p", "type": "pause_for_human", "parameters": parameters}]}


def refusal(parameters: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        Workflow.model_validate(workflow(parameters))
    return str(info.value)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.name)
def test_the_examples_still_load(path: Path) -> None:
    load_workflow(path)


def test_a_pause_without_the_new_fields_is_unchanged() -> None:
    for params in ({}, {"message": "Attendez le médecin"}, {"message": 3, "other": [1]}):
        w = Workflow.model_validate(workflow(params))
        assert w.actions[1].parameters == params


def test_the_spec_shape_is_accepted() -> None:
    params = {"message": "Validation T2A avant codage", "safety_level": "medical_critical",
              "safety_checks": [
                  {"id": "check_ipp", "label": "Vérifier IPP patient", "required": True},
                  {"id": "check_cim10", "label": "Confirmer code CIM-10", "required": True},
                  {"id": "check_note", "label": "Relire la note"}]}
    assert Workflow.model_validate(workflow(params)).actions[1].parameters == params
    assert pause_safety_problems({"safety_level": "standard", "safety_checks": None}) == []


@pytest.mark.parametrize(("parameters", "expected"), [
    ({"safety_level": "medical_critcal"}, "safety_level: Input should be 'standard' or "
                                          "'medical_critical'"),
    ({"safety_level": "MEDICAL_CRITICAL"}, "safety_level"),
    ({"safety_checks": "check_ipp"}, "safety_checks: Input should be a valid list"),
    ({"safety_checks": ["Vérifier IPP"]}, "safety_checks[0]: Input should be a valid"),
    ({"safety_checks": [{"label": "sans id"}]}, "safety_checks[0].id: Field required"),
    ({"safety_checks": [{"id": "a"}]}, "safety_checks[0].label: Field required"),
    ({"safety_checks": [{"id": "a", "label": "  "}]}, "label must not be blank"),
    ({"safety_checks": [{"id": "a b", "label": "A"}]}, "safety_checks[0].id: String should"),
    ({"safety_checks": [{"id": "a", "label": "A", "required": "false"}]},
     "safety_checks[0].required: Input should be a valid boolean"),
    ({"safety_checks": [{"id": "a", "label": "A", "required": 0}]}, "required"),
    ({"safety_checks": [{"id": "a", "label": "A", "requried": False}]},
     "safety_checks[0].requried: Extra inputs are not permitted"),
    ({"safety_checks": [{"id": "a", "label": "A"}, {"id": "a", "label": "B"}]},
     "safety_checks[1].id 'a' is not unique"),
])
def test_what_a_checklist_would_have_to_guess_is_refused(parameters: dict[str, Any],
                                                         expected: str) -> None:
    text = refusal(parameters)
    assert "actions[1].parameters (action_id 'p')" in text and expected in text


def test_the_refusal_reads_well_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(workflow({"safety_level": "critique"})))
    with pytest.raises(ValueError, match=r"actions\[1\]\.parameters \(action_id 'p'\): "
                                         r"safety_level"):
        load_workflow(path)


def test_the_safety_fields_are_checked_on_every_step() -> None:
    """Honoured on any step (a confirming pause goes in front: workflow.safety_rules), so never
    ignored: a misspelt level on a click is refused like one on a pause."""
    w = workflow({})
    w["actions"][0]["parameters"] = {"safety_level": "whatever"}
    with pytest.raises(ValueError, match=r"actions\[0\]\.parameters"):
        Workflow.model_validate(w)
    w["actions"][0]["parameters"] = {"other": 1}
    Workflow.model_validate(w)  # the rest of a click's parameters are not looked at
