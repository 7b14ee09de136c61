"""Outputs, the pure parts: a read_text step's declaration (`workflow check`), the value
judged against it, the value beside a label among OCR words, and the simulated desktop
reading it (docs/protocol.md, "Outputs")."""

from __future__ import annotations

from typing import Any

import pytest
from PIL import Image
from pydantic import ValidationError

from agent.executors.desktop_target import Area, blind_elsewhere
from agent.executors.desktop_text import TextSettings
from agent.executors.read_text import ocr_read, read_output
from agent.executors.scenario import Scenario
from agent.executors.simulated import SimulatedExecutor
from agent.grounding.beside import value_beside
from agent.grounding.text import Word
from console.labels import happening
from console.views import row
from messages.dispatch import DispatchAction, DispatchMeta
from messages.outputs import ReadText
from messages.replay import ReplaySummary
from messages.workflow import Action, Workflow
from workflow.outputs import OUTPUT_INVALID, reads, used, value_problem


def workflow(*actions: dict[str, Any]) -> Workflow:
    return Workflow.model_validate({"workflow_id": "w", "actions": list(actions)})


def read_step(action_id: str = "read", **parameters: Any) -> dict[str, Any]:
    return {"action_id": action_id, "type": "read_text",
            "parameters": {"output": "sejour", "label": "N° de séjour", **parameters}}


def typing(text: str, action_id: str = "type") -> dict[str, Any]:
    return {"action_id": action_id, "type": "type", "parameters": {"text": text}}


# The declaration ---------------------------------------------------------------------------

def test_a_read_step_declares_an_output_used_later() -> None:
    w = workflow(read_step(pattern=r"\d+"), typing("{{outputs.sejour}}"))
    assert list(reads(w)) == ["sejour"]
    assert used(w.actions[1]) == ["sejour"]


@pytest.mark.parametrize(("parameters", "why"), [
    ({"output": "sejour"}, "needs a region, a label, or both"),
    ({"output": "Séjour", "label": "x"}, "output"),
    ({"output": "sejour", "label": "x", "pattern": "(["}, "not a regular expression"),
    ({"output": "sejour", "region": {"x_pct": 0.5, "y_pct": 0, "w_pct": 0.6, "h_pct": 0.1}},
     "within the monitor"),
    ({"output": "sejour", "region": {"x_pct": -0.1, "y_pct": 0, "w_pct": 0.5, "h_pct": 0.1}},
     "x_pct"),
    ({"output": "sejour", "region": {"x_pct": 0, "y_pct": 0, "w_pct": 0, "h_pct": 0.1}},
     "w_pct"),
    ({"output": "sejour", "label": "x", "direction": "left"}, "direction"),
    ({"output": "sejour", "label": "x", "typo": 1}, "typo"),
])
def test_a_read_step_that_cannot_be_read_right_is_refused(parameters: dict[str, Any],
                                                          why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        workflow({"action_id": "read", "type": "read_text", "parameters": parameters})


def test_an_output_read_twice_or_used_before_it_is_read_is_refused() -> None:
    with pytest.raises(ValidationError, match="already read by actions"):
        workflow(read_step("a"), read_step("b"))
    with pytest.raises(ValidationError, match="not an output read by an earlier"):
        workflow(typing("{{outputs.sejour}}"), read_step())
    with pytest.raises(ValidationError, match=r"\{\{outputs.autre\}\} is not an output"):
        workflow(read_step(), typing("{{outputs.autre}}"))


# The value ---------------------------------------------------------------------------------

def test_a_value_fits_its_pattern_whole_and_a_sensitive_one_is_never_named() -> None:
    spec = ReadText(output="sejour", label="x", pattern=r"\d{4}-\d{6}")
    assert value_problem(spec, " 2026-004217 ") is None
    assert "nothing was read" in str(value_problem(spec, "  "))
    assert "'2026-004217 bis' does not match" in str(value_problem(spec, "2026-004217 bis"))
    secret = ReadText(output="sejour", label="x", pattern=r"\d{4}", sensitive=True)
    assert value_problem(secret, "12345") == "••• does not match the pattern '\\\\d{4}'"


# Beside a label ----------------------------------------------------------------------------

def words(*placed: tuple[str, int, int]) -> list[Word]:
    """Words of height 20 at (x, y), 12 px a character; one OCR line per y."""
    return [Word(t, 0.95, (x, y, 12 * len(t), 20), y) for t, x, y in placed]


FORM = words(("Patient", 10, 10), ("DUPONT", 110, 10),
             ("N°", 10, 60), ("de", 45, 60), ("séjour", 75, 60), (":", 150, 60),
             ("2026-004217", 400, 60), ("Entrée", 700, 60), ("01/12/2026", 800, 60),
             ("Médecin", 10, 110), ("traitant", 110, 110),
             ("Dr", 10, 140), ("MARTIN", 45, 140), ("Paul", 130, 140))


def test_the_value_to_the_right_is_the_next_phrase_however_far() -> None:
    assert value_beside(FORM, "N° de séjour").value == "2026-004217"
    assert value_beside(FORM, "Médecin traitant", "below").value == "Dr MARTIN Paul"


def test_no_label_or_two_of_them_read_nothing() -> None:
    assert value_beside(FORM, "N° de dossier").error == \
        "the label 'N° de dossier' is not read on the screen"
    twice = [*FORM, *words(("N°", 10, 300), ("de", 45, 300), ("séjour", 75, 300),
                           ("2026-999999", 400, 300))]
    found = value_beside(twice, "N° de séjour")
    assert found.value is None and "read at 2 places" in str(found.error)
    alone = words(("N°", 10, 60), ("de", 45, 60), ("séjour", 75, 60))
    assert "nothing is read to the right" in str(value_beside(alone, "N° de séjour").error)


def test_the_ocr_reads_a_region_relative_to_the_monitor() -> None:
    seen: list[tuple[int, int]] = []

    def ocr(image: Image.Image) -> list[Word]:
        seen.append(image.size)
        return words(("2026-004217", 2, 2))

    read = ocr_read(Image.new("RGB", (1000, 500)), TextSettings(read=ocr))
    region = {"x_pct": 0.5, "y_pct": 0.2, "w_pct": 0.25, "h_pct": 0.1}
    outcome = read_output({"output": "sejour", "region": region, "pattern": r"\d{4}-\d{6}"},
                          read, "ocr")
    assert outcome.success and outcome.output_value == "2026-004217"
    assert seen == [(250, 50)]
    no_ocr = read_output({"output": "sejour", "region": region},
                         ocr_read(Image.new("RGB", (10, 10)), TextSettings(read=None)))
    assert (no_ocr.success, no_ocr.error, no_ocr.needs_human) == (False, OUTPUT_INVALID, True)


# The simulated desktop ---------------------------------------------------------------------

def simulated(banner: str, **params: Any) -> Any:
    executor = SimulatedExecutor(Scenario.model_validate({"desktop": {
        "banner": banner, "widgets": [{"name": "Séjour", "kind": "field", "x": 0.1, "y": 0.5,
                                       "w": 0.5, "h": 0.1, "text": "2026-000001"}]}}))
    action = Action.model_validate({"action_id": "read", "type": "read_text",
                                    "parameters": {"output": "ipp", **params}})
    return executor.execute(DispatchAction(
        replay_id="r", session_id="s", machine_id="m", action=action, attempt_id="a",
        dispatch_meta=DispatchMeta(first_dispatched_at=0.0)), None)


def test_the_simulated_desktop_reads_beside_a_label_a_field_or_its_banner() -> None:
    banner = "Patient DUPONT Jean   IPP : 004217   Lit 12"
    assert simulated(banner, label="IPP", pattern=r"\d{6}").output_value == "004217"
    assert simulated(banner, label="Séjour").output_value == "2026-000001"
    region = {"x_pct": 0, "y_pct": 0, "w_pct": 1, "h_pct": 0.1}
    assert simulated(banner, region=region).output_value == " ".join(banner.split())
    wrong = simulated("Patient MARTIN   IPP 55", label="IPP", pattern=r"\d{6}")
    assert (wrong.success, wrong.error, wrong.output_value) == (False, OUTPUT_INVALID, "55")
    missing = simulated(banner, label="N° de séjour")
    assert (missing.success, missing.input_performed) == (False, "none")


# Shown to people ---------------------------------------------------------------------------

def test_the_console_shows_the_outputs_and_the_reading() -> None:
    summary = ReplaySummary(replay_id="r", session_id="s", machine_id="m", workflow_id="w",
                            mode="autonomous", status="completed", index=2, total=2,
                            completed_actions=2, created_at=0.0, updated_at=0.0,
                            outputs={"sejour": "2026-004217", "ipp": "•••"})
    assert row(summary).outputs == {"sejour": "2026-004217", "ipp": "•••"}
    assert happening("output_read", {"output": "ipp", "value": "•••"}) == \
        "Valeur « ipp » lue à l'écran : •••"


def test_a_region_of_a_monitor_that_is_gone_is_not_read_on_another() -> None:
    focus = Area(1, (1920, 0, 2560, 1440), "focus", "recorded_monitor_unavailable")
    region = Action.model_validate(read_step(region={"x_pct": 0, "y_pct": 0, "w_pct": 1,
                                                     "h_pct": 0.1}))
    label = Action.model_validate(read_step())
    assert "reads a region" in str(blind_elsewhere(region, focus))
    assert blind_elsewhere(label, focus) is None  # looked for there, as an anchor
    assert blind_elsewhere(region, Area(1, (1920, 0, 2560, 1440), "action", None)) is None
