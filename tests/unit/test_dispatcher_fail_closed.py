"""The dispatcher fails closed (docs/architecture.md, "The life of an action"): no input is
redone after it may have happened, nothing runs after a guard that never answered, no input
is granted during a pause, and a step marked critical waits for a person first.

The same rules are checked through real processes in
tests/integration/test_fail_closed_system.py.
"""

from __future__ import annotations

from pathlib import Path

from actors.dispatcher.machine import rules
from actors.dispatcher.store.dispatcher_store import DispatcherStore
from messages import events
from messages.dispatch import ClaimAttempt, ClaimReply
from messages.replay import Ack, ResumeReplay, StartReplay
from messages.workflow import Action
from tests.unit.test_dispatcher_core import H, _persisted, act, error_code, sent, topics, wf


def claim(h: H, rid: str) -> ClaimReply:
    e = h.cur(rid)
    d = h.core.claim(ClaimAttempt(replay_id=rid, machine_id="m1", action_id=e.action.action_id,
                                  attempt_id=e.attempt_id), "m1", h.now)
    assert isinstance(d.reply, ClaimReply)
    return d.reply


# A failure after the input -----------------------------------------------------------------


def test_a_failure_after_the_input_is_never_retried_and_resume_goes_on() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    d = h.report(rid, success=False, error="capture_failed: locked",
                 input_performed="performed")
    assert sent(d) == []  # no s1_retry1: the click would happen twice
    st = h.status(rid)
    assert st.status == "paused_need_help" and st.pause_reason == rules.FAILED_AFTER_INPUT
    assert "Léa ne la refera pas" in (st.pause_message or "")
    (resumed,) = sent(h.resume(rid))
    assert resumed.action.action_id == "s2"  # the person has checked s1: on to s2
    h.report(rid)
    assert h.status(rid).status == "completed"
    assert h.replay(rid).completed_actions == 2


def test_a_failure_that_may_have_input_pauses_as_unknown() -> None:
    h = H()
    rid, _ = h.start(wf(act("s1", "type"), "s2"))
    h.report(rid, success=False, error="executor_error:OSError: x", input_performed="unknown")
    st = h.status(rid)
    assert st.pause_reason == rules.INPUT_UNKNOWN and "ne sait pas" in (st.pause_message or "")


def test_an_agent_that_does_not_say_is_taken_at_its_worst_for_an_input() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    h.report(rid, success=False, error="target_not_found", input_performed=None)
    assert h.status(rid).pause_reason == rules.INPUT_UNKNOWN
    # Without input (a verify_screen), the same silence is no input: retried as before.
    rid2, _ = h.start(wf(act("v1", "verify_screen"), "s2"), machine="m2")
    (retry,) = sent(h.report(rid2, success=False, error="x", input_performed=None))
    assert retry.action.action_id == "v1_retry1"


def test_a_failure_before_any_input_is_still_retried() -> None:
    h = H()
    rid, _ = h.start(wf("s1"))
    (retry,) = sent(h.report(rid, success=False, error="target_not_found"))
    assert retry.action.action_id == "s1_retry1"


def test_a_needs_human_failure_after_input_is_not_redone_on_resume() -> None:
    """The person at the workstation pushed the mouse into a corner while Léa typed: some
    characters went out. Resuming must not type the text again."""
    h = H()
    rid, _ = h.start(wf(act("s1", "type"), "s2"))
    h.report(rid, success=False, error="failsafe_triggered", needs_human=True,
             input_performed="performed")
    assert h.status(rid).pause_reason == rules.FAILED_AFTER_INPUT
    (resumed,) = sent(h.resume(rid))
    assert resumed.action.action_id == "s2"


# A guard the watchdog gave up ----------------------------------------------------------------


def test_a_guard_given_up_pauses_and_nothing_after_it_runs() -> None:
    h = H()
    rid, _ = h.start(wf(act("v1", "verify_screen"), "s2"))
    d = h.giveup(rid)
    assert sent(d) == [] and h.status(rid).pause_reason == rules.GUARD_LOST
    (redo,) = sent(h.resume(rid))
    assert rules.base_id(redo.action.action_id) == "v1"  # the guard is checked again


def test_a_wait_given_up_goes_on_and_a_scroll_given_up_pauses() -> None:
    h = H()
    rid, _ = h.start(wf(act("w1", "wait"), act("sc", "scroll"), "s3"))
    (nxt,) = sent(h.giveup(rid))
    assert nxt.action.action_id == "sc"
    h.tick(120)  # not two give-ups in a row: not a dead client
    assert sent(h.giveup(rid)) == []
    assert h.status(rid).pause_reason == rules.ORPHAN_MAX_RESENDS


# No input during a pause ---------------------------------------------------------------------


def test_a_pause_withdraws_an_input_not_yet_claimed_and_its_claim_is_refused() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    first = h.cur(rid)
    d = h.do(h.core.pause(rid, rules.OPERATOR, "pause", h.now))
    assert isinstance(d.reply, Ack) and events.ACTION_WITHDRAWN in topics(d)
    assert h.replay(rid).inflight is None
    late = h.core.claim(ClaimAttempt(replay_id=rid, machine_id="m1", action_id="s1",
                                     attempt_id=first.attempt_id), "m1", h.now)
    assert isinstance(late.reply, ClaimReply) and not late.reply.granted
    (again,) = sent(h.resume(rid))
    assert again.action.action_id == "s1" and again.attempt_id != first.attempt_id


def test_a_claimed_input_finishes_and_the_pause_follows() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    assert claim(h, rid).granted
    h.do(h.core.pause(rid, rules.OPERATOR, "pause", h.now))
    assert h.cur(rid).action.action_id == "s1"  # still in flight: it is running
    assert sent(h.report(rid)) == []  # applied, nothing new while paused
    assert h.replay(rid).completed_actions == 1


def test_no_claim_is_granted_to_a_paused_replay_after_a_restart(tmp_path: Path) -> None:
    """Recovery used to re-send a paused replay's input in flight: it is taken back
    instead, and sent again on resume."""
    h = H()
    store = DispatcherStore(tmp_path / "d.sqlite3")
    rid, _ = h.start(wf("s1", "s2"))
    assert claim(h, rid).granted
    h.do(h.core.pause(rid, rules.OPERATOR, "pause", h.now))
    _persisted(h, store)
    store.close()
    store = DispatcherStore(tmp_path / "d.sqlite3")
    h2 = H(state=store.load(), first_id=h.n, now=h.now + 10)
    store.close()
    d = h2.do(h2.core.recover(h2.now))
    assert sent(d) == [] and h2.replay(rid).inflight is None
    (again,) = sent(h2.resume(rid))
    assert again.action.action_id == "s1"  # the agent's ledger answers it if it ran


def test_a_claim_of_a_paused_replay_is_refused() -> None:
    h = H()
    rid, _ = h.start(wf(act("w1", "wait"), "s2"))
    h.report(rid)
    r = h.replay(rid)
    r.status = "paused_need_help"  # as after a pause that left an input in flight (older state)
    assert claim(h, rid).reason == "paused"
    r.status = "running"


# medical_critical on a step that is not a pause ----------------------------------------------


def critical_click() -> Action:
    return Action.model_validate({
        "action_id": "sign", "type": "click", "intention": "Signer la prescription",
        "target_spec": {"by_text": "Signer"},
        "parameters": {"safety_level": "medical_critical"}})


def test_a_step_marked_critical_waits_for_a_named_person_first() -> None:
    for mode in ("supervised", "autonomous"):
        h = H()
        rid, _ = h.start(wf("s1", critical_click()), mode=mode)
        h.report(rid)  # s1 done: the confirming pause comes before the click
        st = h.status(rid)
        assert st.status == "paused_need_help" and h.replay(rid).inflight is None
        assert [c.id for c in st.safety_checks if c.required] == ["confirm_step"]
        assert "Signer la prescription" in (st.pause_message or "")
        nobody = h.do(h.core.resume(ResumeReplay(
            replay_id=rid, acknowledged_check_ids=["confirm_step"]), h.now))
        assert error_code(nobody) == "operator_required"
        (click,) = sent(h.resume(rid, ["confirm_step"]))
        assert click.action.action_id == "sign"
        h.report(rid)
        assert h.status(rid).status == "completed"


def test_a_confirming_pause_whose_id_is_taken_refuses_the_workflow() -> None:
    h = H()
    taken = act("sign.confirm")
    d = h.do(h.core.start(StartReplay(workflow=wf(critical_click(), taken), machine_id="m1"),
                          h.now))
    assert error_code(d) == "invalid_workflow"


def test_the_person_says_redo_and_lea_does_the_step_again() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    h.report(rid, success=False, error="executor_error:X", input_performed="unknown")
    d = h.do(h.core.resume(ResumeReplay(replay_id=rid, operator="bob", step="redo"), h.now))
    (redo,) = sent(d)
    assert redo.action.action_id == "s1_resume" and redo.supersedes == []


def test_the_person_says_done_at_an_ordinary_failure_and_lea_goes_on() -> None:
    h = H()
    rid, _ = h.start(wf(act("s1", "key_combo"), "s2"))
    for _ in range(4):  # the retry budget, then the pause
        h.report(rid, success=False, error="target_not_found")
    assert h.status(rid).pause_reason == rules.TARGET_NOT_FOUND
    d = h.do(h.core.resume(ResumeReplay(replay_id=rid, operator="bob", step="done"), h.now))
    assert [m.action.action_id for m in sent(d)] == ["s2"]


def test_a_step_decision_where_no_step_failed_is_refused() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    h.do(h.core.pause(rid, rules.OPERATOR, "pause", h.now))
    d = h.do(h.core.resume(ResumeReplay(replay_id=rid, operator="bob", step="redo"), h.now))
    assert error_code(d) == "no_failed_step" and h.status(rid).status == "paused_need_help"
