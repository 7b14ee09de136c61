"""The history checker (tests/history.py) on hand-made histories: each property holds on a
clean one and is reported, naming the replay, the step and the evidence, on one that
breaks it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.effects import EffectsLog, read_effects
from messages.dispatch import DispatchAction
from tests.history import (
    DOUBLE_INPUT,
    INPUT_AFTER_FAILED_GUARD,
    INPUT_AFTER_STOP,
    ITEM_INPUT_TWICE,
    NOT_EXACTLY_ONCE,
    Effect,
    Record,
    Verdict,
    account,
    check,
    judged,
)


class History:
    """A replay written step by step: records one second apart, each input half a second
    after the record before it."""

    def __init__(self, replay_id: str = "r1") -> None:
        self.replay_id = replay_id
        self.records: list[Record] = []
        self.effects: list[Effect] = []
        self.t = 1_700_000_000.0

    def record(self, kind: str, **data: Any) -> Record:
        self.t += 1.0
        r = Record(len(self.records) + 1, kind, self.replay_id, self.t, data)
        self.records.append(r)
        return r

    def started(self, total: int) -> History:
        self.record("replay_started", total=total)
        return self

    def dispatch(self, action_id: str, attempt: str, kind: str = "click",
                 resent: bool = False) -> History:
        self.record("action_resent" if resent else "action_dispatched", action_id=action_id,
                    attempt_id=attempt, action_type=kind)
        return self

    def input(self, action_id: str, attempt: str, after_s: float = 0.5,
              replay_id: str | None = "") -> History:
        rid = self.replay_id if replay_id == "" else replay_id
        self.effects.append(Effect(action_id, attempt, self.t + after_s, rid,
                                   f"effects.jsonl:{len(self.effects) + 1}"))
        return self

    def report(self, action_id: str, attempt: str, success: bool = True,
               status: str = "accepted", error: str | None = None) -> History:
        self.record("report_received", status=status, report={
            "replay_id": self.replay_id, "action_id": action_id, "attempt_id": attempt,
            "success": success, "error": error})
        return self

    def step(self, action_id: str, attempt: str, kind: str = "click") -> History:
        """A step dispatched, performed once, accepted."""
        self.dispatch(action_id, attempt, kind)
        if kind in ("click", "type", "key_combo", "scroll"):
            self.input(action_id, attempt)
        return self.report(action_id, attempt)

    def check(self) -> Verdict:
        return check(self.records, self.effects)


def broken(h: History) -> dict[str, list[str]]:
    """Each broken property and the steps it names."""
    out: dict[str, list[str]] = {}
    for f in h.check().findings:
        assert f.replay_id == h.replay_id
        out.setdefault(f.prop, []).append(f.step)
    return out


def completed(h: History) -> History:
    h.record("replay_completed")
    return h


def test_a_clean_replay_keeps_every_property() -> None:
    h = History().started(4).step("s0", "a0").step("s1", "a1", "wait")
    h.step("s2", "a2", "type").step("s3", "a3", "verify_screen")
    verdict = completed(h).check()
    assert (verdict.findings, verdict.unjudged, verdict.replays, verdict.inputs) == (
        [], [], 1, 2)


# double_input -------------------------------------------------------------------------------

def test_one_action_performed_twice_is_a_double_input() -> None:
    h = History().started(1).dispatch("s0", "a0").input("s0", "a0").input("s0", "a0", 0.7)
    h.report("s0", "a0")
    assert broken(h) == {DOUBLE_INPUT: ["s0"]}
    text = account(h.check())
    assert "replay r1, step s0: action s0 performed 2 times" in text
    assert "effects.jsonl:1" in text and "effects.jsonl:2" in text


def test_a_retry_after_a_performed_input_is_a_double_input_without_a_resume() -> None:
    h = History().started(1).dispatch("s0", "a0").input("s0", "a0")
    h.report("s0", "a0", success=False, error="boom")
    h.record("retry_scheduled", action_id="s0", retry_action_id="s0_retry1")
    h.step("s0_retry1", "a1")
    assert broken(completed(h)) == {DOUBLE_INPUT: ["s0"], NOT_EXACTLY_ONCE: ["s0"]}


def test_a_step_redone_after_a_person_resumed_is_not_a_double_input() -> None:
    h = History().started(1).dispatch("s0", "a0").input("s0", "a0")
    h.report("s0", "a0", success=False, error="indeterminate_after_restart")
    h.record("replay_paused", action_id="s0", reason="needs_human", resume_action="s0")
    h.record("replay_resumed", resume_action_id="s0_resume")
    h.step("s0_resume", "a1")
    assert broken(completed(h)) == {}


# input_after_stop ----------------------------------------------------------------------------

def test_the_action_in_flight_at_a_cancel_may_land_after_it_no_other() -> None:
    h = History().started(3).step("s0", "a0").dispatch("s1", "a1")
    h.record("replay_cancelled", purged_inflight=["s1"])
    h.input("s1", "a1")  # claimed before the cancel: D8
    assert broken(h) == {}
    h.dispatch("s2", "a2").input("s2", "a2")  # dispatched after the cancel
    assert broken(h) == {INPUT_AFTER_STOP: ["s2"]}
    assert "after record 5 replay_cancelled" in account(h.check())


def test_no_input_between_a_pause_and_its_resume_but_the_one_in_flight() -> None:
    h = History().started(3).dispatch("s0", "a0")
    h.record("replay_paused", reason="operator", action_id=None)
    h.input("s0", "a0").report("s0", "a0")  # in flight at the pause: finishes
    h.dispatch("s1", "a1").input("s1", "a1").report("s1", "a1")  # not resumed yet
    h.record("replay_resumed", resume_action_id=None)
    h.step("s2", "a2")
    assert broken(h) == {INPUT_AFTER_STOP: ["s1"]}


def test_a_stale_attempt_landing_after_a_pause_is_placed_by_the_clock() -> None:
    """s1's first attempt was resent; the second is accepted (answered from the ledger, no
    line); the first one's input lands after the pause: neither report nor dispatch says
    on which side, the clocks do."""
    h = History().started(2).step("s0", "a0").dispatch("s1", "a1")
    h.dispatch("s1", "a1b", resent=True).report("s1", "a1b")
    h.record("replay_paused", reason="operator", action_id=None)
    h.input("s1", "a1", after_s=0.2)
    assert broken(h) == {INPUT_AFTER_STOP: ["s1"]}
    h.effects[-1] = Effect("s1", "a1", h.t - 0.2, "r1", "effects.jsonl:2")  # before it
    assert broken(h) == {}


# not_exactly_once ----------------------------------------------------------------------------

def test_a_completed_replay_with_an_input_step_never_performed() -> None:
    h = History().started(2).step("s0", "a0").dispatch("s1", "a1").report("s1", "a1")
    assert broken(completed(h)) == {NOT_EXACTLY_ONCE: ["s1"]}
    assert "click step performed 0 times (1 allowed" in account(h.check())


def test_a_completed_replay_that_left_a_step_out() -> None:
    h = completed(History().started(3).step("s0", "a0").step("s1", "a1"))
    assert broken(h) == {NOT_EXACTLY_ONCE: ["(all)"]}
    assert "with 2 of its 3 steps run" in account(h.check())


def test_what_may_complete_without_an_input() -> None:
    """A scroll the watchdog gave up (the replay goes on: D2), a pause_for_human the person
    did (counts_step), a pause skipped in autonomous mode."""
    h = History().started(4).dispatch("s0", "a0", "scroll")
    h.record("action_given_up", action_id="s0", attempt_id="a0", critical=False)
    h.record("replay_paused", reason="user_request", action_id="s1")
    h.record("replay_resumed", resume_action_id=None)
    h.record("action_skipped", action_id="s2")
    h.step("s3", "a3")
    assert broken(completed(h)) == {}


def test_an_unfinished_replay_is_not_judged_on_completeness() -> None:
    h = History().started(2).dispatch("s0", "a0").report("s0", "a0")
    assert broken(h) == {}


# input_after_failed_guard --------------------------------------------------------------------

def test_no_input_after_a_failed_guard_until_a_resume() -> None:
    h = History().started(3).dispatch("g", "a0", "verify_screen")
    h.report("g", "a0", success=False, error="window_title_mismatch")
    h.step("s1", "a1")  # the guard failed, yet the next click ran
    assert broken(h) == {INPUT_AFTER_FAILED_GUARD: ["s1"]}
    assert "after the guard g failed" in account(h.check())
    ok = History().started(3).dispatch("g", "a0", "verify_screen")
    ok.report("g", "a0", success=False, error="window_title_mismatch")
    ok.record("replay_paused", reason="needs_human", action_id="g", resume_action="g")
    ok.record("replay_resumed", resume_action_id="g_resume")
    ok.step("g_resume", "a1", "verify_screen").step("s1", "a2")
    assert broken(ok) == {}


def test_a_guard_that_passes_on_its_retry_lets_the_inputs_go_on() -> None:
    h = History().started(2).dispatch("g", "a0", "verify_screen")
    h.report("g", "a0", success=False, error="window_title_mismatch")
    h.step("g_retry1", "a1", "verify_screen").step("s1", "a2")
    assert broken(completed(h)) == {}


# Which inputs are judged ---------------------------------------------------------------------

def test_an_input_is_placed_by_its_attempt_even_without_a_replay_id() -> None:
    h = History().started(1).dispatch("s0", "a0").input("s0", "a0", replay_id=None)
    h.input("s0", "a0", replay_id=None).report("s0", "a0")
    assert broken(h) == {DOUBLE_INPUT: ["s0"]}


def test_an_input_no_dispatch_record_explains_is_not_judged() -> None:
    """The trail may be behind (the dispatcher's outbox not yet sent): not judged, and
    nothing after it is in the trail either."""
    h = History().started(2).step("s0", "a0").input("s1", "a-unknown")
    verdict = h.check()
    assert verdict.findings == [] and [e.attempt_id for e in verdict.unjudged] == ["a-unknown"]


def test_replays_are_judged_apart() -> None:
    one, two = History("r1").started(1), History("r2").started(1)
    one.step("s0", "a0")
    two.dispatch("s0", "b0").input("s0", "b0").input("s0", "b0").report("s0", "b0")
    verdict = check(one.records + [Record(r.seq + 100, r.kind, r.replay_id, r.at, r.data)
                                   for r in two.records], one.effects + two.effects)
    assert [(f.prop, f.replay_id) for f in verdict.findings] == [(DOUBLE_INPUT, "r2")]


# The effects log names the replay ------------------------------------------------------------

def test_the_effects_log_names_the_replay_and_old_lines_stay_readable(tmp_path: Path) -> None:
    path = tmp_path / "effects.jsonl"
    path.write_text(json.dumps({"action_id": "s0", "attempt_id": "old", "type": "click",
                                "machine_id": "m1", "at": 1.0}) + "\n")
    log = EffectsLog(path, "m1")
    log.record(DispatchAction.model_validate({
        "replay_id": "r9", "session_id": "x", "machine_id": "m1", "attempt_id": "new",
        "action": {"action_id": "s1", "type": "click",
                   "target_spec": {"x_pct": 0.5, "y_pct": 0.5}},
        "dispatch_meta": {"first_dispatched_at": 1.0}}))
    log.close()
    old, new = (Effect.of(line) for line in read_effects(path))
    assert (old.replay_id, old.attempt_id) == (None, "old")
    assert (new.replay_id, new.action_id, new.attempt_id) == ("r9", "s1", "new")


# What fails the test ------------------------------------------------------------------------

def test_a_test_fails_on_a_property_it_does_not_say_it_breaks_and_on_one_it_keeps() -> None:
    h = History().started(1).dispatch("s0", "a0").input("s0", "a0").input("s0", "a0")
    verdict = h.report("s0", "a0").check()
    assert "the history breaks double_input" in (judged(verdict, set()) or "")
    assert judged(verdict, {DOUBLE_INPUT}) is None
    problem = judged(verdict, {DOUBLE_INPUT, INPUT_AFTER_STOP}) or ""
    assert "marked history_breaks(input_after_stop), but the history keeps it" in problem


# item_input_twice ---------------------------------------------------------------------------

def _item_replay(replay_id: str, start: float, q: str = "adm", ref: str = "a") -> History:
    h = History(replay_id)
    h.t = start
    h.record("replay_started", total=1, queue=q, reference=ref)
    return h.step("s0", f"{replay_id}-a0")


def test_one_items_input_in_two_of_its_replays_is_item_input_twice() -> None:
    first, second = _item_replay("r1", 1000.0), _item_replay("r2", 2000.0)
    other = _item_replay("r3", 3000.0, ref="b")  # another item: its own input
    verdict = check([*first.records, *second.records, *other.records],
                    [*first.effects, *second.effects, *other.effects])
    assert [(f.prop, f.replay_id, f.step) for f in verdict.findings] == [
        (ITEM_INPUT_TWICE, "r2", "s0")]
    assert "item adm/a" in account(verdict)


def test_a_person_retrying_the_item_allows_its_input_again() -> None:
    first, second = _item_replay("r1", 1000.0), _item_replay("r2", 2000.0)
    first.record("queue_item_changed", queue="adm", reference="a", state="new",
                 operator="ide", replay_id="r1")
    verdict = check([*first.records, *second.records], [*first.effects, *second.effects])
    assert verdict.findings == []
