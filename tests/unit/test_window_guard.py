"""verify_screen window-title guards and the human-correction mode (docs/screens-and-pauses.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from agent.executors.base import ActionOutcome
from agent.executors.window_guard import (
    GuardSpecError,
    check_window,
    guard_patterns,
    guard_timeout_s,
    read_until,
    title_after,
    title_matches_any,
)
from messages.workflow import Action


@pytest.mark.parametrize("title,patterns,expected", [
    ("Rechercher", ["Rechercher", "Search"], True),
    ("Windows Search", ["rechercher", "SEARCH"], True),
    ("Bloc-notes - Sans titre", ["bloc-notes"], True),
    ("Fenêtre de dépassement de capacité de la barre d'état système.", ["Rechercher",
                                                                      "Search"], False),
    ("DÉMARRER", ["démarrer"], True),
    (None, ["Search"], False),
    ("", ["Search"], False),
    ("Search", ["", "Rechercher"], False),
])
def test_title_matches_any(title: str | None, patterns: list[str], expected: bool) -> None:
    assert title_matches_any(title, patterns) is expected


class FakeTime:
    """A clock that advances only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def titles(script: list[tuple[float, str | None]], t: FakeTime) -> Callable[[], str | None]:
    """The title shown from each time on: ``[(0, "A"), (5, "B")]``."""

    def read() -> str | None:
        current = None
        for at, title in script:
            if t.now >= at:
                current = title
        return current

    return read


@pytest.fixture
def t() -> Iterator[FakeTime]:
    yield FakeTime()


def test_match_succeeds_without_warning(t: FakeTime) -> None:
    out = check_window(["Search"], titles([(0, "Search")], t), 2.0, 120.0, t.clock, t.sleep)
    assert out.success and out.warning is None and out.correction is None
    assert t.now == 0.0


def test_title_arriving_within_the_guard_timeout_is_a_match(t: FakeTime) -> None:
    out = check_window(["Search"], titles([(0, "Desktop"), (1.2, "Search")], t), 2.0, 120.0,
                       t.clock, t.sleep)
    assert out.success and out.warning is None


def test_mismatch_then_the_person_brings_it_up(t: FakeTime) -> None:
    read = titles([(0, "Fenêtre de dépassement"), (30, "Rechercher")], t)
    out = check_window(["Rechercher", "Search"], read, 2.0, 120.0, t.clock, t.sleep)
    assert out.success and out.warning == "setup_guard_window_mismatch"
    assert out.correction is not None
    assert out.correction["observed_title"] == "Fenêtre de dépassement"
    assert out.correction["corrected_title"] == "Rechercher"
    assert out.correction["expected_window_title_contains"] == ["Rechercher", "Search"]
    assert 27 <= out.correction["waited_s"] <= 29
    assert not out.needs_human


def test_mismatch_nobody_comes_needs_human_after_the_correction_timeout(t: FakeTime) -> None:
    told: list[dict[str, object]] = []
    out = check_window(["Search"], titles([(0, "Overflow")], t), 2.0, 120.0, t.clock, t.sleep,
                       told.append)
    assert told == [{"state": "awaiting_human_correction",
                     "expected_window_title_contains": ["Search"],
                     "observed_title": "Overflow", "timeout_s": 120.0}]
    assert not out.success and out.needs_human
    assert out.error == "window_title_mismatch"
    assert out.warning == "setup_guard_window_mismatch"
    assert 122.0 <= t.now <= 122.2
    assert out.target_description is not None and "Overflow" in out.target_description


def test_correction_timeout_zero_fails_at_once(t: FakeTime) -> None:
    out = check_window(["Search"], titles([(0, "Overflow")], t), 0.0, 0.0, t.clock, t.sleep)
    assert out.needs_human and t.now == 0.0


def action(**parameters: object) -> Action:
    return Action.model_validate({"action_id": "v", "type": "verify_screen",
                                  "parameters": parameters})


def test_patterns_from_parameters_or_expected_window_title() -> None:
    assert guard_patterns(action(expected_window_title_contains=["A", "B"])) == ["A", "B"]
    assert guard_patterns(action(expected_window_title_contains="A")) == ["A"]
    assert guard_patterns(action()) == []
    legacy = Action.model_validate({"action_id": "v", "type": "verify_screen",
                                    "expected_window_title": "Word"})
    assert guard_patterns(legacy) == ["Word"]


@pytest.mark.parametrize("bad", [[], [""], [1], {"a": 1}, ["x"] * 51])
def test_malformed_patterns_are_refused(bad: object) -> None:
    with pytest.raises(GuardSpecError):
        guard_patterns(action(expected_window_title_contains=bad))


def test_guard_timeout() -> None:
    assert guard_timeout_s(action()) == 2.0
    assert guard_timeout_s(action(timeout_ms=1500)) == 1.5
    for bad in (-1, "2000", True, 10**9):
        with pytest.raises(GuardSpecError):
            guard_timeout_s(action(timeout_ms=bad))


# The window check after an input (expected_window_title) and before one (read_until).

def clicked(expected: str = "Confirmation") -> Action:
    return Action.model_validate({"action_id": "c", "type": "click",
                                  "target_spec": {"x_pct": 0.5, "y_pct": 0.5},
                                  "expected_window_title": expected})


def after(script: list[tuple[float, str | None]], t: FakeTime) -> ActionOutcome:
    return title_after(ActionOutcome(success=True), clicked(), titles(script, t), t.clock,
                       t.sleep, 2.0)


def test_a_moment_without_a_title_then_the_expected_window_passes(t: FakeTime) -> None:
    out = after([(0, None), (0.5, "Confirmation - Dossier")], t)
    assert out.success and out.warning is None and 0.5 <= t.now < 0.7


def test_an_unreadable_title_does_not_end_the_check_as_passed(t: FakeTime) -> None:
    """One unknown read right after the input used to pass the check: here another window
    comes up after it, and that is what the check must see."""
    out = after([(0, None), (0.4, "Facturation")], t)
    assert out.success and out.warning == "wrong_window"
    assert out.target_description is not None and "'Facturation'" in out.target_description
    assert t.now >= 2.0


@pytest.mark.parametrize("unknown", [None, ""])
def test_a_title_unreadable_to_the_end_is_the_wrong_window(t: FakeTime,
                                                          unknown: str | None) -> None:
    out = after([(0, "Accueil"), (0.2, unknown)], t)
    assert out.success and out.warning == "wrong_window"
    assert out.target_description == ("after the action, the window in front could not be "
                                      "read (expected 'Confirmation')")


def test_no_expected_window_or_a_failed_input_is_not_checked(t: FakeTime) -> None:
    plain = Action.model_validate({"action_id": "c", "type": "key_combo",
                                   "parameters": {"keys": ["tab"]}})
    assert title_after(ActionOutcome(success=True), plain, lambda: None, t.clock,
                       t.sleep).warning is None
    failed = ActionOutcome.failure("target_not_found")
    assert title_after(failed, clicked(), lambda: None, t.clock, t.sleep) is failed
    assert t.now == 0.0


def test_read_until_stops_at_a_definite_answer_or_the_time(t: FakeTime) -> None:
    script = titles([(0, None), (0.3, "A")], t)
    assert read_until(script, lambda v: v is not None, 2.0, t.clock, t.sleep) == "A"
    assert 0.3 <= t.now < 0.5
    assert read_until(lambda: None, lambda v: v is not None, 2.0, t.clock, t.sleep) is None
    assert 2.3 <= t.now <= 2.5  # the last read is at the deadline, not past it
    start = t.now
    assert read_until(lambda: None, lambda v: v is not None, 0.0, t.clock, t.sleep) is None
    assert t.now == start  # no time: one read
