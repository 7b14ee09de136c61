"""Where an action acted, from what the agent reports (actors/loop_detector/site.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from actors.loop_detector.site import box_mask, site_of
from messages.loop import ObserveStep


def step(action_type: str, **fields: Any) -> ObserveStep:
    return ObserveStep.model_validate({
        "replay_id": "r", "action_id": "a", "base_action_id": "a",
        "action_type": action_type, "success": True, **fields})


WINDOW = (0.1, 0.1, 0.4, 0.4)


def test_a_click_is_judged_around_its_point() -> None:
    site = site_of(step("click", actual_position={"x_pct": 0.5, "y_pct": 0.5},
                        site={"window": WINDOW, "focus": WINDOW}), None)
    assert site is not None and site.label == "click 0.500,0.500"
    assert site.boxes == ((0.4, 0.46, 0.2, 0.08),)


def test_typing_at_a_point_is_its_row_across_the_window_and_keys_follow_it() -> None:
    typed = site_of(step("type", actual_position={"x_pct": 0.3, "y_pct": 0.2},
                         site={"window": WINDOW, "focus": WINDOW}), None)
    assert typed is not None and typed.boxes == ((0.1, 0.17, 0.4, 0.06),)  # no X11 toplevel
    key = site_of(step("key_combo", site={"window": WINDOW, "focus": WINDOW}), typed.typed)
    assert key is not None and key.boxes == (typed.typed,)
    caret = (0.2, 0.2, 0.001, 0.02)  # Windows: GetGUIThreadInfo's caret
    key = site_of(step("key_combo", site={"window": WINDOW, "focus": caret}), typed.typed)
    assert key is not None and key.boxes == (typed.typed, caret)


def test_nothing_known_is_no_site_and_a_wait_acts_nowhere() -> None:
    assert site_of(step("type"), None) is None
    assert site_of(step("wait"), None) is None
    only_focus = site_of(step("type", site={"focus": WINDOW}), None)
    assert only_focus is not None and only_focus.boxes == (WINDOW,)


def test_box_mask_covers_the_tiles_of_a_box() -> None:
    mask = box_mask(((0.25, 0.5, 0.5, 0.5),), (4, 8))
    assert mask.sum() == 2 * 4 and mask[2:, 2:6].all() and not mask[:2].any()
    assert not box_mask(((1.2, 0.0, 0.1, 0.1),), (4, 8)).any()
    assert np.array_equal(box_mask((), (2, 2)), np.zeros((2, 2), bool))
