"""The simulated executor: what each action type does to the in-memory desktop, the frames
it renders, the effects it records, and how a scenario makes it misbehave."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent.effects import EffectsLog, read_effects
from agent.executors import ExecutorUnavailable, make_executor
from agent.executors.scenario import CRASH_EXIT_CODE, Scenario, ScenarioError, load_scenario
from agent.executors.simulated import SimulatedExecutor
from messages.dispatch import DispatchAction, DispatchMeta
from messages.monitor import MonitorResolution
from messages.workflow import Action


class Crashed(Exception):
    """Stands in for os._exit in tests."""


def act(action_id: str = "step_1", type_: str = "click", attempt_id: str = "att_1",
        **fields: Any) -> DispatchAction:
    return DispatchAction(
        replay_id="replay_1", session_id="sess_1", machine_id="M1", attempt_id=attempt_id,
        dispatch_meta=DispatchMeta(first_dispatched_at=time.time()),
        action=Action.model_validate({"action_id": action_id, "type": type_, **fields}))


def click(by_text: str, action_id: str = "step_1", **fields: Any) -> DispatchAction:
    return act(action_id, "click", target_spec={"by_text": by_text}, **fields)


class Harness:
    def __init__(self, tmp_path: Path, scenario: dict[str, Any] | None = None) -> None:
        self.sleeps: list[float] = []
        self.exits: list[int] = []
        self.path = tmp_path / "effects.jsonl"
        self.effects = EffectsLog(self.path, "M1")

        def fake_exit(code: int) -> None:
            self.exits.append(code)
            raise Crashed(code)

        self.executor = SimulatedExecutor(Scenario.model_validate(scenario or {}),
                                          sleep=self.sleeps.append, exit=fake_exit)

    @property
    def desktop(self) -> Any:
        return self.executor.desktop

    def run(self, d: DispatchAction) -> Any:
        return self.executor.execute(d, self.effects)

    def effect_ids(self) -> list[str]:
        return [e["action_id"] for e in read_effects(self.path)]


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def png(data: bytes | None) -> Image.Image:
    assert data is not None
    return Image.open(io.BytesIO(data))


def test_click_by_text_hits_the_widget_and_records_one_effect(h: Harness) -> None:
    out = h.run(click("Valider"))
    assert out.success and out.error is None and out.warning is None
    assert out.actual_position == pytest.approx({"x_pct": 0.825, "y_pct": 0.8})
    assert out.resolution_method == "simulated_text_match" and out.resolution_score == 1.0
    assert png(out.screenshot_before).size == (320, 200)
    assert out.screenshot_before != out.screenshot_after
    assert h.desktop.clicks == 1
    lines = read_effects(h.path)
    assert len(lines) == 1
    assert {k: lines[0][k] for k in ("action_id", "attempt_id", "type", "machine_id")} == {
        "action_id": "step_1", "attempt_id": "att_1", "type": "click", "machine_id": "M1"}


def test_click_on_a_button_that_opens_a_window_changes_the_title(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"desktop": {"window_title": "Accueil", "widgets": [
        {"name": "Ouvrir", "x": 0.1, "y": 0.1, "opens": "Dossier MOREL"}]}})
    assert h.run(click("Ouvrir")).success
    assert h.desktop.window_title == "Dossier MOREL"


def test_click_by_position_when_no_text(h: Harness) -> None:
    out = h.run(act("s", "double_click", target_spec={"x_pct": 0.5, "y_pct": 0.5}))
    assert out.success and out.resolution_method == "position_fallback"
    assert out.actual_position == {"x_pct": 0.5, "y_pct": 0.5}


def test_unknown_target_is_not_found_and_performs_nothing(h: Harness) -> None:
    out = h.run(click("Imprimer"))
    assert (out.success, out.error, out.warning) == (False, "target_not_found",
                                                     "visual_resolve_failed")
    assert out.target_description == "Imprimer"
    assert out.target_spec is not None and out.target_spec.by_text == "Imprimer"
    assert h.effect_ids() == [] and h.desktop.clicks == 0


def test_type_goes_into_the_field_and_ctrl_a_replaces(h: Harness) -> None:
    assert h.run(act("t1", "type", target_spec={"by_text": "Recherche"},
                     parameters={"text": "MOREL"})).success
    assert h.desktop.find("Recherche").text == "MOREL"
    assert h.run(act("t2", "type", parameters={"text": " C"})).success
    assert h.desktop.find("Recherche").text == "MOREL C"
    assert h.run(act("k1", "key_combo", parameters={"keys": ["ctrl", "a"]})).success
    assert h.run(act("t3", "type", parameters={"text": "DUPONT"})).success
    assert h.desktop.find("Recherche").text == "DUPONT"
    assert h.effect_ids() == ["t1", "t2", "k1", "t3"]


def test_scroll_moves_and_wait_sleeps_without_an_effect(h: Harness) -> None:
    assert h.run(act("sc", "scroll", parameters={"delta": -5})).success
    assert h.desktop.scroll == -5
    assert h.run(act("w", "wait", parameters={"duration_ms": 1500})).success
    assert h.sleeps == [1.5]
    assert h.effect_ids() == ["sc"]


def test_verify_screen_checks_the_window_title(h: Harness) -> None:
    ok = h.run(act("v1", "verify_screen",
                   parameters={"expected_window_title_contains": ["Search", "dossier"]}))
    assert ok.success
    bad = h.run(act("v2", "verify_screen",
                    parameters={"expected_window_title_contains": ["Rechercher"]}))
    assert (bad.success, bad.error, bad.warning, bad.needs_human) == (
        False, "window_title_mismatch", "setup_guard_window_mismatch", True)
    assert h.effect_ids() == []


def test_expected_window_before_guards_the_input(h: Harness) -> None:
    out = h.run(click("Valider", expected_window_before="Facturation"))
    assert (out.success, out.error, out.warning) == (False, "wrong_window", "wrong_window")
    assert h.effect_ids() == []
    assert h.run(click("Valider", "step_2", expected_window_before="DOSSIER patient")).success


@pytest.mark.parametrize("fields", [
    {"monitor_index": 3},  # not on this desktop: no router said where instead
    {"monitor_index": 15, "monitor_resolution": {
        "idx": -1, "offset_x": 0, "offset_y": 0, "w": 0, "h": 0,
        "source": "composite_fallback", "reason": "invalid_index"}},
])
def test_a_monitor_that_cannot_be_found_gets_no_input(h: Harness,
                                                      fields: dict[str, Any]) -> None:
    d = act("s", "click", target_spec={"x_pct": 0.5, "y_pct": 0.5},
            monitor_index=fields["monitor_index"])
    if "monitor_resolution" in fields:
        d = d.model_copy(update={"monitor_resolution": MonitorResolution.model_validate(
            fields["monitor_resolution"])})
    out = h.run(d)
    assert (out.success, out.error, out.needs_human) == (False, "monitor_unavailable", True)
    assert h.desktop.clicks == 0 and h.effect_ids() == []
    assert h.run(act("s2", "click", target_spec={"x_pct": 0.5, "y_pct": 0.5},
                     monitor_index=0)).success


def test_without_monitors_only_an_action_naming_none_runs(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"desktop": {"monitors": []}})
    out = h.run(click("Valider", monitor_index=0))
    assert (out.error, out.needs_human) == ("monitor_unavailable", True)
    assert h.run(click("Valider", "step_2")).success and h.desktop.clicks == 1


def test_pause_for_human_is_not_an_agent_action(h: Harness) -> None:
    out = h.run(act("p", "pause_for_human"))
    assert not out.success and out.error == "unsupported_action_type:pause_for_human"


def test_scenario_fails_n_times_then_succeeds_across_business_retries(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"actions": {"step_3": {"fail": "target_not_found", "times": 2}}})
    assert h.run(click("Valider", "step_3")).error == "target_not_found"
    assert h.run(click("Valider", "step_3_retry1")).error == "target_not_found"
    assert h.run(click("Valider", "step_3_retry2")).success
    assert h.effect_ids() == ["step_3_retry2"]


@pytest.mark.parametrize("action_id", ["step_3_retry12", "step_3_resume", "step_3_resume2",
                                       "step_3_resume17"])
def test_a_step_rule_applies_to_its_retries_and_every_resume(action_id: str) -> None:
    scenario = Scenario.model_validate({"actions": {"step_3": {"fail": "target_not_found"},
                                                    "step_3_resume3": {"delay_s": 1}}})
    rule = scenario.rule_for(Action.model_validate({"action_id": action_id, "type": "click"}))
    assert rule is not None and rule[0] == "action:step_3"
    own = scenario.rule_for(Action.model_validate({"action_id": "step_3_resume3",
                                                   "type": "click"}))
    assert own is not None and own[0] == "action:step_3_resume3"  # its own rule first
    other = scenario.rule_for(Action.model_validate({"action_id": "step_30_resume2",
                                                     "type": "click"}))
    assert other is None


def test_scenario_system_dialog_blocks_until_a_person_acts(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"actions": {"s": {"system_dialog": "uac_consent", "times": 1}}})
    out = h.run(click("Valider", "s"))
    assert (out.success, out.error, out.needs_human) == (False, "system_dialog:uac_consent",
                                                         True)
    assert out.system_dialog is not None and out.system_dialog["category"] == "uac_consent"
    assert out.screenshot_before != out.screenshot_after  # the dialog is on screen
    # It stays up: the next action cannot get through either.
    assert h.run(click("Valider", "s2")).error == "system_dialog:uac_consent"
    assert h.effect_ids() == []


def test_scenario_wrong_window_by_type(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"types": {"click": {"wrong_window": True}}})
    out = h.run(click("Valider"))
    assert (out.error, out.warning) == ("wrong_window", "wrong_window")
    assert h.run(act("sc", "scroll")).success


def test_scenario_loop_performs_the_input_but_nothing_changes(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"default": {"loop": True}})
    out = h.run(click("Valider"))
    assert out.success and out.warning == "no_screen_change"
    assert out.screenshot_before == out.screenshot_after
    assert h.effect_ids() == ["step_1"] and h.desktop.clicks == 0


def test_scenario_delay_sleeps_first(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"actions": {"slow": {"delay_s": 30}}})
    assert h.run(click("Valider", "slow")).success
    assert h.sleeps == [30]


def test_scenario_crash_before_the_effect(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"actions": {"c": {"crash": "before"}}})
    with pytest.raises(Crashed):
        h.run(click("Valider", "c"))
    assert h.exits == [CRASH_EXIT_CODE] and h.effect_ids() == []


def test_scenario_crash_after_the_effect(tmp_path: Path) -> None:
    h = Harness(tmp_path, {"actions": {"c": {"crash": "after"}}})
    with pytest.raises(Crashed):
        h.run(click("Valider", "c"))
    assert h.exits == [CRASH_EXIT_CODE] and h.effect_ids() == ["c"]


def test_every_outcome_says_whether_its_input_went_out(tmp_path: Path) -> None:
    """``input_performed``: the dispatcher retries only ``none`` (docs/protocol.md)."""
    h = Harness(tmp_path, {"actions": {
        "refused": {"fail": "target_not_found"}, "late": {"fail_after_input": "capture_failed"},
        "half": {"raise_in_input": True}}})
    assert h.run(click("Valider", "ok")).input_performed == "performed"
    assert h.run(click("Valider", "refused")).input_performed == "none"
    assert h.run(click("Nulle part", "absent")).input_performed == "none"
    assert h.run(act("w", "wait", parameters={"duration_ms": 1})).input_performed == "none"
    assert h.run(act("v", "verify_screen")).input_performed == "none"
    late = h.run(click("Valider", "late"))
    assert (late.success, late.error, late.input_performed) == (
        False, "capture_failed", "performed")
    with pytest.raises(RuntimeError):  # the agent says "unknown" (agent/process.py)
        h.run(click("Valider", "half"))
    assert h.effect_ids() == ["ok", "late"]


def test_scenario_files_are_validated(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"actions": {"a": {"fail": "x", "times": 1}},
                                "types": {"wait": {"delay_s": 1}}}))
    assert load_scenario(good).actions["a"].times == 1
    for bad in ({"actions": {"a": {"fail": "x", "loop": True}}},
                {"actions": {"a": {"explode": True}}},
                {"types": {"teleport": {"loop": True}}},
                {"actions": {"a": {"crash": "during"}}}):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ScenarioError):
            load_scenario(path)
    (tmp_path / "notjson.json").write_text("{")
    with pytest.raises(ScenarioError):
        load_scenario(tmp_path / "notjson.json")
    with pytest.raises(ScenarioError):
        load_scenario(tmp_path / "missing.json")


def test_desktop_executor_refuses_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a screen the desktop executor refuses to start (the agent exits 2)."""
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(ExecutorUnavailable, match="DISPLAY is not set"):
        make_executor("desktop")
    assert make_executor("simulated").name == "simulated"
