"""The guarded Windows setup chain (docs/screens-and-pauses.md)."""

from __future__ import annotations

import pytest

from messages.workflow import Workflow
from workflow.setup_chain import Targets, setup_actions

CANONICAL = [
    "click_start_menu", "wait_start_menu", "verify_start_menu_open", "click_search_box",
    "wait_search_ready", "verify_search_box_active", "type_app_name", "wait_search_results",
    "verify_search_results_visible", "click_app_result", "wait_app_launch",
    "verify_app_launched",
]


def names(actions: list) -> list[str]:  # type: ignore[type-arg]
    return [a.action_id.removeprefix("act_setup_") for a in actions]


def test_notepad_click_then_type_is_the_12_step_chain() -> None:
    actions = setup_actions("Bloc-notes")
    assert names(actions) == CANONICAL
    assert [a.type for a in actions] == [
        "click", "wait", "verify_screen", "click", "wait", "verify_screen", "type", "wait",
        "verify_screen", "click", "wait", "verify_screen"]
    assert actions[6].parameters["text"] == "Bloc-notes"
    Workflow(workflow_id="setup", actions=actions)  # valid and unique ids


def test_direct_typing_has_no_search_box_click_nor_its_guard() -> None:
    got = names(setup_actions("Bloc-notes", search_mode="direct_typing"))
    assert "click_search_box" not in got and "verify_search_box_active" not in got
    assert got == [n for n in CANONICAL if n not in ("click_search_box",
                                                     "verify_search_box_active")]


@pytest.mark.parametrize("mode", ["click_then_type", "direct_typing"])
def test_guards_are_before_typing_and_before_the_result_click(mode: str) -> None:
    got = names(setup_actions("Bloc-notes", search_mode=mode))  # type: ignore[arg-type]
    assert got.index("verify_start_menu_open") < got.index("type_app_name")
    assert got.index("verify_search_results_visible") < got.index("click_app_result")
    if mode == "click_then_type":
        assert got.index("click_search_box") < got.index("verify_search_box_active") \
            < got.index("type_app_name")


def test_every_guard_waits_at_most_2_s_and_has_fr_and_en_titles() -> None:
    actions = setup_actions("Bloc-notes", source_window_title="Recherche Windows")
    guards = {a.action_id.removeprefix("act_setup_"): a for a in actions
              if a.type == "verify_screen"}
    assert len(guards) == 4
    for guard in guards.values():
        assert 0 < guard.parameters["timeout_ms"] <= 2000
    start = guards["verify_start_menu_open"].parameters["expected_window_title_contains"]
    assert {"Rechercher", "Search", "Démarrer", "Start"} <= set(start)
    box = guards["verify_search_box_active"].parameters["expected_window_title_contains"]
    assert box[0] == "Recherche Windows" and {"Rechercher", "Search"} <= set(box)
    final = guards["verify_app_launched"].parameters["expected_window_title_contains"]
    assert set(final) == {"Bloc-notes", "Notepad"}


def test_every_step_is_marked_setup_phase() -> None:
    assert all(a.parameters["_setup_phase"] is True for a in setup_actions("Paint"))


def test_no_final_check_without_a_known_title() -> None:
    got = names(setup_actions("Logiciel Maison"))
    assert len(got) == 11 and "verify_app_launched" not in got
    assert "verify_app_launched" in names(setup_actions("Logiciel Maison",
                                                        app_window_titles=["Maison"]))


def test_office_waits_longer_and_result_click_expects_the_search_window() -> None:
    by_id = {a.action_id: a for a in setup_actions("Word", language="en")}
    assert by_id["act_setup_wait_app_launch"].parameters["duration_ms"] == 3000
    assert by_id["act_setup_click_app_result"].expected_window_before == "Search"
    fr = {a.action_id: a for a in setup_actions("Bloc-notes")}
    assert fr["act_setup_wait_app_launch"].parameters["duration_ms"] == 2000
    assert fr["act_setup_click_app_result"].expected_window_before == "Rechercher"


def test_anchor_targets_fall_back_to_their_position() -> None:
    targets = Targets(start_menu={"anchor_image_base64": "iVBORw0KGgo=", "x_pct": 0.01,
                                  "y_pct": 0.99})
    click = setup_actions("Paint", targets=targets, prefix="s1", monitor_index=1)[0]
    assert click.action_id == "s1_click_start_menu" and click.monitor_index == 1
    assert click.target_spec is not None
    assert click.target_spec.resolve_order == ["template", "position"]


@pytest.mark.parametrize("kwargs", [{"app_name": " "},
                                    {"app_name": "x", "search_mode": "voice"}])
def test_bad_arguments_are_refused(kwargs: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError):
        setup_actions(**kwargs)


def test_a_workflow_with_setup_starts_with_the_guarded_chain() -> None:
    from actors.dispatcher.core import DispatcherCore
    from actors.dispatcher.machine.state import DispatcherConfig
    from messages.control import ErrorReply
    from messages.replay import StartReplay
    from messages.workflow import Workflow
    from workflow.setup_chain import with_setup

    own = {"action_id": "s1", "type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.5}}
    wf = Workflow.model_validate({"workflow_id": "w", "setup": {"app_name": "Bloc-notes"},
                                  "actions": [own]})
    expanded = with_setup(wf)
    assert expanded.actions[0].action_id == "act_setup_click_start_menu"
    assert expanded.actions[-1].action_id == "s1" and len(expanded.actions) == 13
    assert expanded.setup is None and with_setup(expanded) == expanded
    ids = iter(f"id{i}" for i in range(100))
    core = DispatcherCore(DispatcherConfig(), lambda: next(ids))
    d = core.start(StartReplay(workflow=wf, machine_id="m1"), 0.0)
    (r,) = core.replays.values()
    assert r.total == 13 and r.inflight is not None
    assert r.inflight.action.action_id == "act_setup_click_start_menu"
    clash = wf.model_copy(update={"actions": [wf.actions[0].model_copy(
        update={"action_id": "act_setup_type_app_name"})]})
    d = core.start(StartReplay(workflow=clash, machine_id="m1"), 0.0)
    assert isinstance(d.reply, ErrorReply) and d.reply.code == "invalid_workflow"
