"""The dispatcher's pure core through every applicable edge case a-u of the
transport contract (docs/architecture.md, "The contract's named rules").

Every transition goes through ``H.do``, which checks the invariants I1-I6 after it.
Not applicable at the core level: s (reverse-proxy buffering of SSE: we have no HTTP);
j is read as "one action in flight per session, in order" (there is no polling lock).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from actors.dispatcher.core import DispatcherCore
from actors.dispatcher.machine.decision import (
    AuditRecord,
    Decision,
    Notify,
    PublishEvent,
    RecordReport,
    SendToAgent,
    TrackInFlight,
    UntrackInFlight,
)
from actors.dispatcher.machine.rules import base_id, resume_id, retry_id
from actors.dispatcher.machine.state import (
    DispatcherConfig,
    DispatcherState,
    InFlightEntry,
    ReplayState,
    Resolution,
    mutable_dump,
    mutable_restore,
)
from actors.dispatcher.store.dispatcher_store import DispatcherStore
from messages import events
from messages.control import ErrorReply
from messages.dispatch import (
    ActionReport,
    AgentHello,
    ClaimAttempt,
    ClaimReply,
    DispatchAction,
    InFlightList,
    OrphanGiveUp,
    OrphanResend,
    ReportAck,
)
from messages.pause import AgentPaused
from messages.replay import (
    Ack,
    CancelReplay,
    GetReplayStatus,
    ReplayCancelled,
    ReplayResumed,
    ReplayStarted,
    ReplayStatusReply,
    ResumeReplay,
    StartReplay,
)
from messages.workflow import CRITICAL_TYPES, Action, Workflow
from workflow.safety_rules import declared_checks

E = TypeVar("E")

# Harness -----------------------------------------------------------------------------------


def act(action_id: str, kind: str = "click", **parameters: Any) -> Action:
    defaults: dict[str, dict[str, Any]] = {
        "type": {"text": "bonjour"}, "key_combo": {"keys": ["ctrl", "s"]},
        "wait": {"duration_ms": 500}}
    params = {**defaults.get(kind, {}), **parameters}
    return Action.model_validate({"action_id": action_id, "type": kind, "parameters": params,
                                  "intention": f"étape {action_id}"})


def wf(*actions: Action | str, workflow_id: str = "wf") -> Workflow:
    items = [a if isinstance(a, Action) else act(a) for a in actions]
    return Workflow(workflow_id=workflow_id, actions=items)


def of(decision: Decision, kind: type[E]) -> list[E]:
    return [e for e in decision.effects if isinstance(e, kind)]


def notices(decision: Decision) -> list[AgentPaused]:
    """The pause notices sent to agents."""
    return [n.message for n in of(decision, Notify) if isinstance(n.message, AgentPaused)]


def sent(decision: Decision) -> list[DispatchAction]:
    return [e.message for e in of(decision, SendToAgent)]


def topics(decision: Decision) -> list[str]:
    return [e.topic for e in of(decision, PublishEvent)]


def audits(decision: Decision) -> list[str]:
    return [e.kind for e in of(decision, AuditRecord)]


def event(decision: Decision, topic: str) -> dict[str, Any]:
    (found,) = [e.data for e in of(decision, PublishEvent) if e.topic == topic]
    return found


class H:
    """A core with a fake clock and counter ids; checks the invariants after every call."""

    def __init__(self, config: DispatcherConfig | None = None,
                 state: DispatcherState | None = None, first_id: int = 0,
                 now: float = 1000.0) -> None:
        self.n = first_id
        self.now = now
        self.core = DispatcherCore(config or DispatcherConfig(), self.new_id, state)
        self.decisions: list[Decision] = []

    def new_id(self) -> str:
        self.n += 1
        return f"id{self.n:04d}"

    def do(self, decision: Decision) -> Decision:
        self.core.check_invariants(decision)
        self.decisions.append(decision)
        return decision

    def tick(self, seconds: float = 1.0) -> None:
        self.now += seconds

    def replay(self, rid: str) -> ReplayState:
        return self.core.replays[rid]

    def cur(self, rid: str) -> InFlightEntry:
        entry = self.replay(rid).inflight
        assert entry is not None, f"{rid} has nothing in flight"
        return entry

    def start(self, workflow: Workflow, machine: str = "m1", mode: str = "supervised",
              session: str | None = None) -> tuple[str, Decision]:
        d = self.do(self.core.start(StartReplay(
            workflow=workflow, machine_id=machine, mode=mode,
            session_id=session, operator="alice"), self.now))
        assert isinstance(d.reply, ReplayStarted)
        return d.reply.replay_id, d

    def report_msg(self, rid: str, *, success: bool = True, attempt: str | None = None,
                   action_id: str | None = None, machine: str | None = None,
                   **fields: Any) -> ActionReport:
        r = self.replay(rid)
        entry = r.inflight
        # A failure is one before any input unless a test says otherwise.
        fields.setdefault("input_performed", "performed" if success else "none")
        return ActionReport(
            replay_id=rid, session_id=r.session_id, machine_id=machine or r.machine_id,
            action_id=action_id or (entry.action.action_id if entry else "none"),
            attempt_id=attempt or (entry.attempt_id if entry else "none"),
            success=success, **fields)

    def send_report(self, msg: ActionReport, sender: str | None = None) -> Decision:
        return self.do(self.core.report(msg, sender or msg.machine_id, self.now))

    def report(self, rid: str, success: bool = True, sender: str | None = None,
               **fields: Any) -> Decision:
        return self.send_report(self.report_msg(rid, success=success, **fields), sender)

    def resend(self, rid: str, attempt: str | None = None) -> Decision:
        e = self.cur(rid)
        return self.do(self.core.orphan_resend(OrphanResend(
            action_id=e.action.action_id, attempt_id=attempt or e.attempt_id, age_s=45.0),
            self.now))

    def giveup(self, rid: str) -> Decision:
        e = self.cur(rid)
        return self.do(self.core.orphan_giveup(OrphanGiveUp(
            action_id=e.action.action_id, attempt_id=e.attempt_id, age_s=135.0,
            resent_count=e.orphan_resends), self.now))

    def hello(self, machine: str = "m1") -> Decision:
        return self.do(self.core.agent_hello(
            AgentHello(machine_id=machine, instance_id="inst", pid=42), self.now))

    def resume(self, rid: str, ids: list[str] | None = None) -> Decision:
        return self.do(self.core.resume(ResumeReplay(
            replay_id=rid, acknowledged_check_ids=ids or [], operator="bob"), self.now))

    def cancel(self, rid: str) -> Decision:
        return self.do(self.core.cancel(CancelReplay(replay_id=rid, operator="bob"), self.now))

    def status(self, rid: str) -> Any:
        d = self.do(self.core.status(GetReplayStatus(replay_id=rid)))
        assert isinstance(d.reply, ReplayStatusReply)
        return d.reply.replays[0]


def granted(h: H, rid: str) -> None:
    """The agent's claim of the attempt in flight is granted: its input may be running."""
    e = h.cur(rid)
    d = h.core.claim(ClaimAttempt(replay_id=rid, machine_id=e.machine_id,
                                  action_id=e.action.action_id, attempt_id=e.attempt_id),
                     e.machine_id, h.now)
    assert isinstance(d.reply, ClaimReply) and d.reply.granted


def ack_status(d: Decision) -> str:
    assert isinstance(d.reply, ReportAck), d.reply
    return d.reply.status


def error_code(d: Decision) -> str:
    assert isinstance(d.reply, ErrorReply), d.reply
    return d.reply.code


def unchanged(d: Decision) -> None:
    """Nothing but the reports log and its audit record: state untouched."""
    assert d.changed == set()
    assert {type(e) for e in d.effects} <= {RecordReport, AuditRecord}


# Start, dispatch, completion ----------------------------------------------------------------


def test_start_dispatches_the_first_action_tracked_before_sent() -> None:
    h = H()
    rid, d = h.start(wf("s1", "s2"))
    assert isinstance(d.reply, ReplayStarted) and d.reply.status == "running"
    assert d.reply.session_id == "id0002"  # generated with new_id when not given
    kinds = [type(e) for e in d.effects if isinstance(e, TrackInFlight | SendToAgent)]
    assert kinds == [TrackInFlight, SendToAgent]
    (msg,) = sent(d)
    assert msg.action.action_id == "s1" and msg.machine_id == "m1"
    assert msg.dispatch_meta.first_dispatched_at == h.now
    assert msg.dispatch_meta.resent_count == 0 and msg.dispatch_meta.resend_reason is None
    assert of(d, TrackInFlight)[0].entry.attempt_id == msg.attempt_id
    assert topics(d) == [events.REPLAY_STARTED, events.ACTION_DISPATCHED]
    assert audits(d) == ["replay_started", "action_dispatched"]
    assert d.changed == {rid}


def test_the_core_says_which_decisions_must_reach_the_disk() -> None:
    """``Decision.durable``: the shell stages exactly these (docs/durability.md); a decision
    writes the replays it changed, not the others."""
    h = H()
    rid, start = h.start(wf("s1", "s2"))
    other, _ = h.start(wf("t1"), machine="m2")
    assert start.durable and [r.replay_id for r in start.writes] == [rid]
    e = h.cur(rid)
    claim = h.core.claim(ClaimAttempt(replay_id=rid, machine_id="m1", action_id="s1",
                                      attempt_id=e.attempt_id), "m1", h.now)
    # Granted, noted in memory, not stored: after a restart every attempt is a new one.
    assert isinstance(claim.reply, ClaimReply) and claim.reply.granted and e.claimed
    assert not claim.durable and claim.writes == ()
    assert not h.core.status(GetReplayStatus(replay_id=rid)).durable
    assert not h.core.consulted(rid, "no-such-token", None, "timeout", h.now).durable
    report = h.report(rid)
    assert report.durable and [r.replay_id for r in report.writes] == [rid]
    refused = h.report(rid, sender="m2")  # nothing changed, but the refusal is recorded
    assert refused.durable and refused.writes == () and of(refused, RecordReport)
    assert other not in report.changed


@pytest.mark.parametrize("step_id", ["step_1_retry2", "step_resume", "x" * 120])
def test_start_refuses_step_ids_that_cannot_take_a_suffix(step_id: str) -> None:
    h = H()
    d = h.do(h.core.start(StartReplay(workflow=wf("ok", step_id), machine_id="m1"), h.now))
    assert error_code(d) == "invalid_workflow" and d.effects == [] and d.changed == set()
    assert h.core.replays == {} and h.n == 0


def test_start_keeps_a_given_session_id() -> None:
    h = H()
    rid, _d = h.start(wf("s1"), session="sess_demo_42")
    assert h.replay(rid).session_id == "sess_demo_42"


def test_successful_reports_walk_the_workflow_to_completion() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2", "s3"))
    for step in ("s1", "s2"):
        d = h.report(rid)
        assert ack_status(d) == "accepted"
        assert [m.action.action_id for m in sent(d)] == [f"s{int(step[1]) + 1}"]
    d = h.report(rid)
    assert topics(d)[-1] == events.REPLAY_COMPLETED
    assert "replay_completed" in audits(d)
    s = h.status(rid)
    assert (s.status, s.index, s.total, s.completed_actions) == ("completed", 3, 3, 3)
    assert s.counters["dispatched"] == 3 and s.current_action_id is None
    inflight = h.do(h.core.inflight()).reply
    assert isinstance(inflight, InFlightList) and inflight.entries == []


def test_case_j_one_action_in_flight_per_session_replays_wait_their_turn() -> None:
    h = H()
    a, _ = h.start(wf("a1", "a2"), session="S")
    b, d = h.start(wf("b1"), session="S")
    _c, dc = h.start(wf("c1"), session="T")
    assert sent(d) == [] and event(d, events.REPLAY_STARTED)["waiting_for"] == a
    assert h.replay(b).status == "running" and h.replay(b).inflight is None
    assert [m.action.action_id for m in sent(dc)] == ["c1"]  # other sessions run alongside
    assert [m.action.action_id for m in sent(h.report(a))] == ["a2"]
    d = h.report(a)  # a completes: b's first action goes out in the same decision
    assert h.replay(a).status == "completed"
    assert [m.action.action_id for m in sent(d)] == ["b1"]


def test_a_paused_replay_keeps_its_session_until_cancelled() -> None:
    h = H()
    a, _ = h.start(wf("a1", act("p", "pause_for_human")), session="S")
    b, _ = h.start(wf("b1"), session="S")
    h.report(a)
    assert h.replay(a).status == "paused_need_help" and h.replay(b).inflight is None
    d = h.cancel(a)
    assert [m.action.action_id for m in sent(d)] == ["b1"]


def test_status_of_all_one_and_unknown_replays() -> None:
    h = H()
    a, _ = h.start(wf("s1"))
    b, _ = h.start(wf("t1"), machine="m2")
    reply = h.do(h.core.status(GetReplayStatus())).reply
    assert isinstance(reply, ReplayStatusReply)
    assert [s.replay_id for s in reply.replays] == [a, b]
    s = h.status(b)
    assert (s.machine_id, s.workflow_id, s.mode, s.current_action_id) == (
        "m2", "wf", "supervised", "t1")
    assert error_code(h.do(h.core.status(GetReplayStatus(replay_id="nope")))) == "not_found"


def test_inflight_lists_every_action_waiting_for_a_report() -> None:
    h = H()
    a, _ = h.start(wf("s1"))
    b, _ = h.start(wf("t1"), machine="m2")
    reply = h.do(h.core.inflight()).reply
    assert isinstance(reply, InFlightList)
    assert [(e.replay_id, e.action_id, e.machine_id, e.action_type) for e in reply.entries] == [
        (a, "s1", "m1", "click"), (b, "t1", "m2", "click")]


def test_finished_replays_beyond_the_limit_are_forgotten_in_memory() -> None:
    h = H(DispatcherConfig(max_finished_replays=2))
    done = []
    for i in range(4):
        rid, _ = h.start(wf(f"s{i}"))
        h.report(rid)
        done.append(rid)
    h.start(wf("last"))
    assert [r for r in done if r in h.core.replays] == done[2:]


# Reports: first wins, stale, duplicate, unknown, refused -----------------------------------


def test_case_k_a_report_delivered_twice_is_applied_once() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    msg = h.report_msg(rid)
    assert ack_status(h.send_report(msg)) == "accepted"
    d = h.send_report(msg)
    assert ack_status(d) == "duplicate"
    unchanged(d)
    assert of(d, RecordReport)[0].status == "duplicate"
    assert h.replay(rid).completed_actions == 1


def test_I3_report_pop_is_idempotent() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2", "s3"))
    msg = h.report_msg(rid)
    statuses = [ack_status(h.send_report(msg)) for _ in range(5)]
    assert statuses == ["accepted"] + ["duplicate"] * 4
    r = h.replay(rid)
    assert (r.completed_actions, r.index, r.inflight and r.inflight.action.action_id) == (
        1, 1, "s2")


def test_case_q_a_synthetic_precheck_report_is_unknown_and_harmless() -> None:
    h = H()
    rid, _ = h.start(wf("s1"))
    d = h.report(rid, action_id="precheck_wait_a1b2c3", attempt="x")
    assert ack_status(d) == "unknown"
    unchanged(d)
    assert h.cur(rid).action.action_id == "s1"


def test_a_report_for_an_unknown_replay_is_unknown() -> None:
    h = H()
    rid, _ = h.start(wf("s1"))
    msg = h.report_msg(rid).model_copy(update={"replay_id": "ghost"})
    d = h.send_report(msg)
    assert ack_status(d) == "unknown"
    unchanged(d)


@pytest.mark.parametrize("sender, claimed", [("m2", "m1"), ("m1", "m2"), ("m2", "m2")])
def test_a_report_from_another_machine_is_refused_without_change(sender: str,
                                                                 claimed: str) -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    before = h.status(rid)
    d = h.report(rid, machine=claimed, sender=sender)
    assert error_code(d) == "wrong_machine"
    unchanged(d)
    assert of(d, RecordReport)[0].status == "refused"
    assert "report_refused" in audits(d)
    assert h.status(rid) == before
    assert ack_status(h.report(rid)) == "accepted"  # the right machine still can


def test_a_repeat_of_an_accepted_report_from_another_machine_is_refused_too() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    msg = h.report_msg(rid)
    h.send_report(msg)
    assert error_code(h.send_report(msg, sender="m9")) == "wrong_machine"


def test_every_report_is_recorded_with_its_status_and_audited() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    d = h.report(rid, screenshot_after=b"\x89PNG")
    (rec,) = of(d, RecordReport)
    assert (rec.status, rec.sender_machine, rec.at) == ("accepted", "m1", h.now)
    audit = next(e for e in of(d, AuditRecord) if e.kind == "report_received")
    assert audit.data["status"] == "accepted"
    assert audit.data["report"]["screenshot_after"] == b"\x89PNG"


# Business retries (case e) -----------------------------------------------------------------


@pytest.mark.parametrize("given, base", [
    ("step_1", "step_1"), ("step_1_retry1", "step_1"), ("step_1_retry12", "step_1"),
    ("step_1_resume", "step_1"), ("step_1_resume3", "step_1"), ("retry_1", "retry_1")])
def test_base_id_strips_one_suffix(given: str, base: str) -> None:
    assert base_id(given) == base


def test_suffixes_replace_never_stack() -> None:
    assert retry_id("step_1", 1) == "step_1_retry1"
    assert retry_id("step_1_retry1", 2) == "step_1_retry2"
    assert retry_id("step_1_resume", 4) == "step_1_retry4"
    assert resume_id("step_1_retry3", 1) == "step_1_resume"
    assert resume_id("step_1_resume", 1) == "step_1_resume"
    assert resume_id("step_1_resume", 2) == "step_1_resume2"


def test_case_e_failed_verify_retries_at_the_head_then_pauses() -> None:
    h = H()
    rid, _ = h.start(wf("step_1", "step_2"))
    ids = []
    for _ in range(3):
        d = h.report(rid, success=False, error="target_not_found",
                     target_description="Coller ou saisir le dossier patient")
        (msg,) = sent(d)
        ids.append(msg.action.action_id)
        assert msg.dispatch_meta.resent_count == 0  # a new action, not a transport resend
        assert of(d, TrackInFlight)[0].entry.resent_count == 0  # no orphan budget used
    assert ids == ["step_1_retry1", "step_1_retry2", "step_1_retry3"]
    d = h.report(rid, success=False, error="target_not_found",
                 target_description="Coller ou saisir le dossier patient")
    assert sent(d) == []
    s = h.status(rid)
    assert (s.status, s.pause_reason) == ("paused_need_help", "target_not_found")
    assert s.pause_message == "Je n'y arrive pas (« Coller ou saisir le dossier patient »)"
    assert (s.index, s.completed_actions, s.counters["retries"]) == (0, 0, 3)
    assert notices(d)[0].message == s.pause_message
    assert event(d, events.REPLAY_PAUSED)["resume_action"] == "step_1_retry3"


def test_an_ambiguous_target_pauses_at_once_without_retry() -> None:
    """Two places read alike: a retry would see the same screen; a person decides."""
    h = H()
    rid, _ = h.start(wf("step_1", "step_2"))
    d = h.report(rid, success=False, error="ambiguous_target",
                 target_description="OK; 2 places read like 'OK'")
    assert sent(d) == []
    s = h.status(rid)
    assert (s.status, s.pause_reason) == ("paused_need_help", "ambiguous_target")
    assert s.counters.get("retries", 0) == 0 and s.index == 0
    assert "plusieurs" in (s.pause_message or "")


def test_resume_rebuilds_the_failed_action_with_a_fresh_retry_budget() -> None:
    h = H()
    rid, _ = h.start(wf("step_1", "step_2"))
    for _ in range(4):
        h.report(rid, success=False, error="target_not_found")
    d = h.resume(rid)
    assert [m.action.action_id for m in sent(d)] == ["step_1_resume"]
    d = h.report(rid, success=False, error="target_not_found")
    assert [m.action.action_id for m in sent(d)] == ["step_1_retry4"]  # unique, not stacked
    for _ in range(3):
        h.report(rid, success=False, error="target_not_found")
    assert h.replay(rid).status == "paused_need_help"
    assert [m.action.action_id for m in sent(h.resume(rid))] == ["step_1_resume2"]
    d = h.report(rid)
    assert [m.action.action_id for m in sent(d)] == ["step_2"]
    assert (h.replay(rid).index, h.replay(rid).completed_actions) == (1, 1)


def test_other_failures_retry_then_pause_as_action_failed() -> None:
    h = H(DispatcherConfig(max_retries_per_action=1))
    rid, _ = h.start(wf("s1"))
    h.report(rid, success=False, error="verify_failed")
    h.report(rid, success=False, error="verify_failed")
    s = h.status(rid)
    assert s.pause_reason == "action_failed" and "verify_failed" in (s.pause_message or "")


def test_already_executed_with_success_counts_as_success() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    d = h.report(rid, warning="already_executed")
    assert ack_status(d) == "accepted" and sent(d)[0].action.action_id == "s2"
    assert h.replay(rid).counters["already_executed"] == 1


# Pauses from reports -----------------------------------------------------------------------


@pytest.mark.parametrize("fields, reason, words", [
    ({"error": "system_dialog:uac_consent", "needs_human": True,
      "system_dialog": {"category": "uac_consent", "reason": "UAC consent prompt"}},
     "system_dialog", "uac_consent"),
    ({"error": "click_failed", "warning": "wrong_window"}, "wrong_window", "bonne fenêtre"),
    ({"error": "popup", "needs_human": True}, "needs_human", "besoin d'aide"),
    ({"error": "indeterminate_after_restart", "needs_human": True}, "needs_human",
     "redémarré"),
])
def test_failed_report_signals_pause_and_resume_redoes_the_step(
        fields: dict[str, Any], reason: str, words: str) -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    d = h.report(rid, success=False, **fields)
    assert sent(d) == [] and topics(d)[-1] == events.REPLAY_PAUSED
    s = h.status(rid)
    assert s.status == "paused_need_help" and s.pause_reason == reason
    assert words in (s.pause_message or "")
    assert [m.action.action_id for m in sent(h.resume(rid))] == ["s1_resume"]


def test_successful_report_with_wrong_window_pauses_without_redoing_the_step() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    h.report(rid, success=True, warning="wrong_window")
    s = h.status(rid)
    assert (s.status, s.pause_reason, s.completed_actions, s.index) == (
        "paused_need_help", "wrong_window", 1, 1)
    assert [m.action.action_id for m in sent(h.resume(rid))] == ["s2"]  # no double click


# pause_for_human, checks, resume refusals (I6) ----------------------------------------------


CHECKS = [{"id": "check_ipp", "label": "Vérifier IPP patient", "required": True},
          {"id": "check_cim10", "label": "Confirmer code CIM-10", "required": True},
          {"id": "check_note", "label": "Relire la note", "required": False}]


def test_I6_supervised_pause_for_human_pauses_and_dispatches_nothing() -> None:
    h = H()
    pause = act("p", "pause_for_human", message="Validation T2A avant codage")
    rid, _ = h.start(wf("s1", pause, "s2"))
    d = h.report(rid)
    assert sent(d) == []
    s = h.status(rid)
    assert (s.status, s.pause_reason, s.pause_message, s.index) == (
        "paused_need_help", "user_request", "Validation T2A avant codage", 1)
    for _ in range(3):  # nothing makes a paused replay dispatch
        assert sent(h.hello()) == []
    d = h.resume(rid)
    assert [m.action.action_id for m in sent(d)] == ["s2"]
    assert isinstance(d.reply, ReplayResumed) and d.reply.remaining_actions == 1
    assert h.replay(rid).index == 2  # the pause step is resolved by the person


def test_case_o_pause_for_human_is_handled_here_never_in_flight() -> None:
    h = H()
    rid, d = h.start(wf(act("p", "pause_for_human")))
    assert sent(d) == [] and of(d, TrackInFlight) == []
    assert h.status(rid).pause_message == "étape p"  # the intention when no message
    d = h.resume(rid)
    assert h.replay(rid).status == "completed" and sent(d) == []


def test_autonomous_mode_skips_a_pause_for_human_without_checks() -> None:
    h = H()
    rid, d = h.start(wf(act("p", "pause_for_human"), "s1"), mode="autonomous")
    assert [m.action.action_id for m in sent(d)] == ["s1"]
    skipped = [e.data for e in of(d, PublishEvent) if e.data.get("outcome") == "skipped"]
    assert skipped and skipped[0]["action_id"] == "p"
    assert "action_skipped" in audits(d) and h.replay(rid).index == 1


def test_autonomous_mode_still_pauses_when_the_step_has_safety_checks() -> None:
    h = H()
    rid, d = h.start(wf(act("p", "pause_for_human", safety_checks=CHECKS), "s1"),
                     mode="autonomous")
    s = h.status(rid)
    assert s.status == "paused_need_help" and sent(d) == []
    assert [(c.id, c.required, c.source) for c in s.safety_checks] == [
        ("check_ipp", True, "declarative"), ("check_cim10", True, "declarative"),
        ("check_note", False, "declarative")]


def test_declared_checks_are_normalised_and_never_dropped() -> None:
    a = act("p", "pause_for_human", safety_checks=[
        "Vérifier le patient", {"label": "sans id"}, {"id": "x"}, {"id": "x", "label": "bis"},
        {"id": "y", "label": "Y", "required": "maybe"}])
    checks = declared_checks(a)
    assert [(c.id, c.label, c.required) for c in checks] == [
        ("check_1", "Vérifier le patient", True), ("check_2", "sans id", True),
        ("x", "x", True), ("x_4", "bis", True), ("y", "Y", True)]


def test_resume_refusals_change_nothing() -> None:
    h = H()
    rid, _ = h.start(wf("s1", act("p", "pause_for_human", safety_checks=CHECKS), "s2"))
    assert error_code(h.do(h.core.resume(ResumeReplay(replay_id="ghost"), h.now))) == (
        "not_found")
    assert error_code(h.resume(rid)) == "not_paused"  # running: 409-like
    h.report(rid)
    before = h.status(rid)
    d = h.resume(rid, ["check_ipp"])
    assert error_code(d) == "required_checks_missing"
    assert isinstance(d.reply, ErrorReply) and d.reply.detail["missing"] == ["check_cim10"]
    d = h.resume(rid, ["check_ipp", "check_cim10", "chk_from_another_pause"])
    assert error_code(d) == "unknown_check_ids"
    assert isinstance(d.reply, ErrorReply)
    assert d.reply.detail["ids"] == ["chk_from_another_pause"]
    assert h.status(rid) == before and h.replay(rid).checks_acknowledged is None


def test_resume_records_acknowledged_checks_operator_and_time() -> None:
    h = H()
    rid, _ = h.start(wf(act("p", "pause_for_human", safety_checks=CHECKS), "s1"))
    h.tick(30)
    d = h.resume(rid, ["check_ipp", "check_cim10"])
    assert isinstance(d.reply, ReplayResumed) and d.reply.status == "resumed"
    assert h.replay(rid).checks_acknowledged == {
        "ids": ["check_ipp", "check_cim10"], "operator": "bob", "at": h.now}
    audit = next(e.data for e in of(d, AuditRecord) if e.kind == "replay_resumed")
    assert (audit["acknowledged_check_ids"], audit["operator"], audit["at"]) == (
        ["check_ipp", "check_cim10"], "bob", h.now)
    assert event(d, events.REPLAY_RESUMED)["reason"] == "user_request"
    s = h.status(rid)
    assert (s.status, s.pause_reason, s.pause_message, s.safety_checks) == (
        "running", None, None, [])


@pytest.mark.parametrize("operator", [None, "", "   "])
def test_required_checks_need_a_named_operator(operator: str | None) -> None:
    h = H()
    rid, _ = h.start(wf(act("p", "pause_for_human", safety_checks=CHECKS), "s1"))
    before = h.status(rid)
    d = h.do(h.core.resume(ResumeReplay(replay_id=rid, operator=operator,
                                        acknowledged_check_ids=["check_ipp", "check_cim10"]),
                           h.now))
    assert error_code(d) == "operator_required"
    assert isinstance(d.reply, ErrorReply)
    assert d.reply.detail["required"] == ["check_ipp", "check_cim10"]
    assert h.status(rid) == before and h.replay(rid).checks_acknowledged is None


def test_a_pause_without_required_checks_resumes_without_a_name() -> None:
    h = H()
    rid, _ = h.start(wf(act("p", "pause_for_human"), "s1"))
    d = h.do(h.core.resume(ResumeReplay(replay_id=rid), h.now))
    assert isinstance(d.reply, ReplayResumed)


@pytest.mark.parametrize("mode", ["supervised", "autonomous"])
def test_a_medical_critical_pause_always_pauses_with_a_required_check(mode: str) -> None:
    h = H()
    rid, d = h.start(wf(act("p", "pause_for_human", safety_level="medical_critical"), "s1"),
                     mode=mode)
    s = h.status(rid)
    assert s.status == "paused_need_help" and sent(d) == []
    assert [(c.id, c.required, c.source) for c in s.safety_checks] == [
        ("confirm_step", True, "system")]
    assert error_code(h.resume(rid)) == "required_checks_missing"
    assert isinstance(h.resume(rid, ["confirm_step"]).reply, ReplayResumed)


def test_cancel_at_a_failure_pause_ends_failed_else_cancelled() -> None:
    h = H()
    failing, _ = h.start(wf("s1", "s2"), machine="m1")
    h.report(failing, success=False, error="system_dialog:uac")
    assert h.status(failing).pause_reason == "system_dialog"
    d = h.cancel(failing)
    assert isinstance(d.reply, ReplayCancelled) and d.reply.status == "failed"
    assert h.status(failing).status == "failed"
    assert event(d, events.REPLAY_CANCELLED)["outcome"] == "failed"
    asked, _ = h.start(wf(act("p", "pause_for_human"), "s1"), machine="m2")
    d = h.cancel(asked)
    assert isinstance(d.reply, ReplayCancelled) and d.reply.status == "cancelled"
    running, _ = h.start(wf("s1", "s2"), machine="m3")
    assert h.cancel(running).reply == ReplayCancelled(
        replay_id=running, session_id=h.replay(running).session_id, status="cancelled")


# Watchdog: orphans, I5, D2, dead client (cases a b c d f g h n u) --------------------------


def test_case_a_lost_dispatch_is_resent_with_a_new_attempt() -> None:
    h = H()
    rid, d0 = h.start(wf("s1", "s2"))
    first = sent(d0)[0]
    h.tick(45)
    d = h.resend(rid)
    (msg,) = sent(d)
    assert msg.action.action_id == "s1" and msg.attempt_id != first.attempt_id
    assert msg.dispatch_meta.model_dump() == {
        "first_dispatched_at": first.dispatch_meta.first_dispatched_at, "resent_count": 1,
        "last_resent_at": h.now, "resend_reason": "orphan_timeout"}
    assert of(d, UntrackInFlight) == [UntrackInFlight("s1", first.attempt_id)]
    (track,) = of(d, TrackInFlight)
    assert (track.entry.attempt_id, track.entry.resent_count, track.entry.dispatched_at) == (
        msg.attempt_id, 1, h.now)
    ev = event(d, events.DISPATCH_ORPHAN_RESENT)
    assert (ev["resent"], ev["previous_attempt_id"], ev["attempt_id"]) == (
        1, first.attempt_id, msg.attempt_id)
    assert "action_resent" in audits(d)
    assert isinstance(d.reply, Ack) and d.reply.status == "resent"
    assert ack_status(h.report(rid)) == "accepted"


def test_orphan_resend_stays_at_the_head_even_if_tail_is_asked() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    e = h.cur(rid)
    d = h.do(h.core.orphan_resend(OrphanResend(
        action_id="s1", attempt_id=e.attempt_id, age_s=45, position="tail"), h.now))
    assert [m.action.action_id for m in sent(d)] == ["s1"]  # s2 never overtakes s1
    ev = event(d, events.DISPATCH_ORPHAN_RESENT)
    assert (ev["position"], ev["requested_position"]) == ("head", "tail")


def test_case_b_and_u_silent_agent_is_resent_then_given_up() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    for _ in range(2):
        h.tick(45)
        h.resend(rid)
    assert h.cur(rid).orphan_resends == 2
    h.tick(45)
    d = h.giveup(rid)
    assert event(d, events.DISPATCH_ORPHAN_GIVEUP)["critical"] is True
    s = h.status(rid)
    assert (s.status, s.pause_reason) == ("paused_need_help", "orphan_max_resends")
    assert (s.pause_message or "").startswith("Léa n'a pas répondu")
    assert "vérifiez" in (s.pause_message or "")
    assert h.replay(rid).resolved["s1"].outcome == "abandoned"
    assert [m.action.action_id for m in sent(h.resume(rid))] == ["s1_resume"]


def test_case_c_executed_but_unreported_action_is_acked_once_after_resend() -> None:
    h = H()
    rid, _d0 = h.start(wf("s1", "s2"))
    h.tick(45)
    h.resend(rid)
    # The agent's ledger answers the resend with the original report, on the new attempt.
    d = h.report(rid, warning="already_executed")
    assert ack_status(d) == "accepted" and h.replay(rid).completed_actions == 1


def test_case_d_report_lost_then_retried_by_the_agent() -> None:
    h = H()
    rid, _d0 = h.start(wf("s1", "s2"))
    msg = h.report_msg(rid)
    assert ack_status(h.send_report(msg)) == "accepted"
    assert ack_status(h.send_report(msg)) == "duplicate"  # the ack was lost: harmless


def test_case_d_report_lost_meanwhile_resent_old_attempt_is_stale() -> None:
    h = H()
    rid, _d0 = h.start(wf("s1", "s2"))
    old = h.report_msg(rid)
    h.tick(45)
    h.resend(rid)
    d = h.send_report(old)
    assert ack_status(d) == "stale"
    unchanged(d)
    assert of(d, RecordReport)[0].status == "stale"
    assert ack_status(h.report(rid, warning="already_executed")) == "accepted"


def test_case_f_report_first_then_watchdog_resend_is_skipped_I5() -> None:
    h = H()
    rid, d0 = h.start(wf("s1", "s2"))
    (first,) = sent(d0)
    h.report(rid)
    for call in (h.core.orphan_resend(OrphanResend(action_id="s1", attempt_id=first.attempt_id,
                                                   age_s=45), h.now),
                 h.core.orphan_giveup(OrphanGiveUp(action_id="s1", attempt_id=first.attempt_id,
                                                   age_s=45, resent_count=2), h.now)):
        d = h.do(call)
        assert isinstance(d.reply, Ack) and d.reply.status == "skipped"
        assert d.effects == [] and d.changed == set()


def test_case_f_resend_first_then_late_report_is_stale() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    late = h.report_msg(rid)
    h.resend(rid)
    assert ack_status(h.send_report(late)) == "stale"
    assert h.cur(rid).action.action_id == "s1"


def test_I5_watchdog_recheck_ignores_an_old_attempt_or_another_action() -> None:
    h = H()
    rid, d0 = h.start(wf("s1", "s2"))
    old = sent(d0)[0].attempt_id
    h.resend(rid)
    before = h.status(rid)
    for call in (OrphanResend(action_id="s1", attempt_id=old, age_s=45),
                 OrphanResend(action_id="s2", attempt_id=h.cur(rid).attempt_id, age_s=45)):
        d = h.do(h.core.orphan_resend(call, h.now))
        assert isinstance(d.reply, Ack) and d.reply.status == "skipped" and d.effects == []
    d = h.do(h.core.orphan_giveup(OrphanGiveUp(action_id="s1", attempt_id=old, age_s=90,
                                               resent_count=2), h.now))
    assert isinstance(d.reply, Ack) and d.reply.status == "skipped"
    assert h.status(rid) == before


def test_case_g_double_delivery_is_reported_once() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    first = h.report_msg(rid)
    h.resend(rid)
    second = h.report_msg(rid, warning="already_executed")
    assert [ack_status(h.send_report(m)) for m in (first, second, first, second)] == [
        "stale", "accepted", "duplicate", "duplicate"]
    assert h.replay(rid).completed_actions == 1


@pytest.mark.parametrize("kind", sorted(CRITICAL_TYPES | {"scroll"}))
def test_case_n_D2_giving_up_an_input_action_pauses(kind: str) -> None:
    h = H()
    rid, _ = h.start(wf(act("s1", kind), "s2"))
    d = h.giveup(rid)
    assert sent(d) == [] and h.status(rid).pause_reason == "orphan_max_resends"
    assert "action_given_up" in audits(d) and "replay_paused" in audits(d)


def test_case_n_D2_giving_up_a_wait_logs_and_goes_on() -> None:
    """Only a wait: a scroll may have run, a verify_screen guards what follows
    (tests/unit/test_dispatcher_fail_closed.py)."""
    h = H()
    rid, _ = h.start(wf(act("s1", "wait"), "s2"))
    d = h.giveup(rid)
    assert event(d, events.DISPATCH_ORPHAN_GIVEUP)["pauses"] is False
    assert [m.action.action_id for m in sent(d)] == ["s2"]
    r = h.replay(rid)
    assert (r.status, r.index, r.completed_actions, r.counters["abandoned"]) == (
        "running", 1, 0, 1)
    d = h.report(rid)
    assert h.replay(rid).status == "completed"


def test_case_h_two_giveups_within_60s_signal_a_dead_client_and_pause() -> None:
    h = H()
    rid, _ = h.start(wf(act("w1", "wait"), act("w2", "wait"), "s3"), session="S")
    h.giveup(rid)
    h.tick(59)
    d = h.giveup(rid)
    assert event(d, events.DEAD_CLIENT_SIGNAL) == {
        "session_id": "S", "dead_count": 2, "period_s": 60.0, "replay_id": rid,
        "machine_id": "m1", "at": h.now}
    s = h.status(rid)
    assert (s.status, s.pause_reason) == ("paused_need_help", "dead_client")
    assert (s.pause_message or "").startswith("Léa ne répond plus")
    assert sent(d) == []


def test_giveups_more_than_60s_apart_are_not_a_dead_client() -> None:
    h = H()
    rid, _ = h.start(wf(act("w1", "wait"), act("w2", "wait"), "s3"))
    h.giveup(rid)
    h.tick(61)
    d = h.giveup(rid)
    assert events.DEAD_CLIENT_SIGNAL not in topics(d)
    assert h.replay(rid).status == "running"


def test_dead_client_counts_giveups_across_replays_of_one_session() -> None:
    h = H()
    a, _ = h.start(wf(act("w1", "wait")), session="S")
    b, _ = h.start(wf(act("x1", "wait"), "x2"), session="S")
    h.giveup(a)  # a completes, b starts
    h.tick(10)
    d = h.giveup(b)
    assert event(d, events.DEAD_CLIENT_SIGNAL)["dead_count"] == 2


# Agent hello (cases r, t) ------------------------------------------------------------------


def test_case_t_agent_hello_resends_in_flight_without_using_the_watchdog_budget() -> None:
    h = H()
    rid, d0 = h.start(wf("s1", "s2"))
    other, _ = h.start(wf("t1"), machine="m2")
    h.resend(rid)
    h.tick(5)
    d = h.hello("m1")
    (msg,) = sent(d)
    assert msg.machine_id == "m1" and msg.action.action_id == "s1"
    assert msg.dispatch_meta.resent_count == 2
    assert msg.dispatch_meta.resend_reason == "agent_reconnected"
    assert msg.dispatch_meta.first_dispatched_at == sent(d0)[0].dispatch_meta.first_dispatched_at
    (track,) = of(d, TrackInFlight)
    assert track.entry.resent_count == 1  # the watchdog's give-up budget is untouched
    assert track.entry.dispatched_at == h.now  # and its timer starts again
    assert isinstance(d.reply, Ack) and d.reply.detail["resent"] == ["s1"]
    assert h.cur(other).resent_count == 0


def test_a_hello_does_not_resend_what_is_underway_to_the_agent() -> None:
    """The shell knows a dispatch is on its way, or was received by this agent process:
    the hello keeps it (no resend of what is in the agent's hands)."""
    h = H()
    rid, d0 = h.start(wf("s1", "s2"))
    first = sent(d0)[0]
    d = h.do(h.core.agent_hello(AgentHello(machine_id="m1", instance_id="inst", pid=42),
                                h.now, underway=frozenset({first.attempt_id})))
    assert sent(d) == [] and h.cur(rid).attempt_id == first.attempt_id
    assert isinstance(d.reply, Ack) and d.reply.detail == {"resent": [], "kept": ["s1"]}


def test_the_pause_notice_names_the_step_and_its_monitor() -> None:
    h = H()
    step = act("p", "pause_for_human", message="Appelez le médecin").model_copy(
        update={"monitor_index": 1})
    rid, _ = h.start(wf("s0", step))
    h.report(rid, success=True)
    (notice,) = notices(h.hello("m1"))
    assert (notice.action_id, notice.monitor_index) == ("p", 1)
    h2 = H()
    h2.start(wf(act("q", "pause_for_human", message="Appelez le médecin")))
    (other,) = notices(h2.hello("m1"))
    assert (other.action_id, other.monitor_index) == ("q", None)


def test_case_r_hello_while_paused_shows_the_pause_again_and_dispatches_nothing() -> None:
    h = H()
    rid, _ = h.start(wf(act("p", "pause_for_human", message="Appelez le médecin")))
    d = h.hello("m1")
    assert sent(d) == []
    assert [(n.replay_id, n.message) for n in notices(d)] == [(rid, "Appelez le médecin")]
    assert [n.service for n in of(d, Notify)] == ["agent.m1"]


# Pause while in flight (case l), cancel (case m), completion (case p) ----------------------


def test_case_l_pause_while_in_flight_applies_the_report_and_stops_there() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    granted(h, rid)  # running: an input not yet granted is withdrawn instead
    d = h.do(h.core.pause(rid, "loop_detected", "Léa tourne en rond", h.now))
    assert of(d, UntrackInFlight) == [] and h.cur(rid).action.action_id == "s1"  # D8
    h.tick()
    d = h.report(rid)
    assert ack_status(d) == "accepted" and sent(d) == []
    r = h.replay(rid)
    assert (r.status, r.completed_actions, r.inflight) == ("paused_need_help", 1, None)
    assert [m.action.action_id for m in sent(h.resume(rid))] == ["s2"]


def test_a_failure_reported_while_paused_is_queued_for_after_the_resume() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    granted(h, rid)
    h.do(h.core.pause(rid, "loop_detected", "Léa tourne en rond", h.now))
    d = h.report(rid, success=False, error="target_not_found")
    assert sent(d) == []
    assert [m.action.action_id for m in sent(h.resume(rid))] == ["s1_retry1"]


def test_pause_refusals() -> None:
    h = H()
    rid, _ = h.start(wf(act("p", "pause_for_human")))
    assert error_code(h.do(h.core.pause("ghost", "x", "y", h.now))) == "not_found"
    assert error_code(h.do(h.core.pause(rid, "x", "y", h.now))) == "not_running"


def test_case_m_cancel_in_flight_purges_and_a_late_report_is_unknown() -> None:
    h = H()
    rid, d0 = h.start(wf("s1", "s2", "s3"))
    late = h.report_msg(rid)
    d = h.cancel(rid)
    assert isinstance(d.reply, ReplayCancelled) and d.reply.status == "cancelled"
    assert of(d, UntrackInFlight) == [UntrackInFlight("s1", sent(d0)[0].attempt_id)]
    ev = event(d, events.REPLAY_CANCELLED)
    assert (ev["purged_inflight"], ev["purged_queue"], ev["operator"]) == (["s1"], 2, "bob")
    assert "replay_cancelled" in audits(d)
    d = h.send_report(late)
    assert ack_status(d) == "unknown"
    unchanged(d)
    d = h.do(h.core.orphan_resend(OrphanResend(action_id="s1", attempt_id=late.attempt_id,
                                               age_s=45), h.now))
    assert isinstance(d.reply, Ack) and d.reply.status == "skipped"  # no ghost resend


def test_I4_cancel_purges_queue_and_in_flight() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2", "s3"))
    h.report(rid, success=False, error="target_not_found")  # a retry is in flight
    h.cancel(rid)
    r = h.replay(rid)
    assert (r.status, r.inflight, r.queue_len(), r.inserted) == ("cancelled", None, 0, [])
    assert h.do(h.core.inflight()).reply == InFlightList(entries=[])


def test_cancel_refusals() -> None:
    h = H()
    rid, _ = h.start(wf("s1"))
    assert error_code(h.do(h.core.cancel(CancelReplay(replay_id="ghost"), h.now))) == (
        "not_found")
    h.report(rid)
    assert error_code(h.cancel(rid)) == "not_running"


def test_a_paused_replay_can_be_cancelled() -> None:
    h = H()
    rid, _ = h.start(wf(act("p", "pause_for_human"), "s1"))
    h.cancel(rid)
    s = h.status(rid)
    assert (s.status, s.pause_reason) == ("cancelled", None)


def test_case_p_completion_purges_in_flight_leftovers_D4() -> None:
    h = H()
    rid, _ = h.start(wf("s1"))
    last = h.report_msg(rid)
    d = h.send_report(last)
    assert of(d, UntrackInFlight) == [UntrackInFlight("s1", last.attempt_id)]
    assert h.replay(rid).status == "completed"
    d = h.do(h.core.orphan_resend(OrphanResend(action_id="s1", attempt_id=last.attempt_id,
                                               age_s=45), h.now))
    assert isinstance(d.reply, Ack) and d.reply.status == "skipped"
    assert ack_status(h.send_report(last)) == "duplicate"


# Invariant checker: it does catch broken states --------------------------------------------


def _broken(mutate: Any, name: str) -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    mutate(h, h.replay(rid))
    with pytest.raises(AssertionError, match=name):
        h.core.check_invariants()


def test_I1_checker_catches_an_in_flight_action_still_queued() -> None:
    _broken(lambda h, r: r.inserted.insert(0, r.inflight.action), "I1")


def test_I2_checker_catches_two_actions_in_flight_on_one_session() -> None:
    def mutate(h: H, r: ReplayState) -> None:
        rid, _ = h.start(wf("t1"), session=r.session_id)
        h.replay(rid).inflight = InFlightEntry(act("zz"), "other", "m1", 0.0, 0.0)
        h.core.book.attempts["other"] = rid
    _broken(mutate, "I2")


def test_I3_checker_catches_a_resolved_action_in_flight_again() -> None:
    def mutate(h: H, r: ReplayState) -> None:
        r.resolved["s1"] = Resolution("acked", "x")
    _broken(mutate, "I3")


def test_I4_checker_catches_a_finished_replay_with_leftovers() -> None:
    def mutate(h: H, r: ReplayState) -> None:
        r.status = "cancelled"
    _broken(mutate, "I4")


def test_I5_checker_catches_a_stale_attempt_index() -> None:
    def mutate(h: H, r: ReplayState) -> None:
        h.core.book.attempts["ghost"] = r.replay_id
    _broken(mutate, "I5")


def test_I6_checker_catches_a_dispatch_while_paused() -> None:
    h = H()
    rid, d = h.start(wf("s1", "s2"))
    granted(h, rid)  # kept in flight by the pause
    h.core.pause(rid, "x", "y", h.now - 1)  # a pause dated before the dispatch
    with pytest.raises(AssertionError, match="I6"):
        h.core.check_invariants()
    with pytest.raises(AssertionError, match="I6"):
        h.core.check_invariants(d)


# Resuming a step the watchdog gave up: the resume supersedes its abandoned ids -------------


def ids_sent(d: Decision) -> list[tuple[str, list[str]]]:
    return [(m.action.action_id, m.supersedes) for m in sent(d)]


def test_resume_after_an_orphan_giveup_supersedes_the_abandoned_ids() -> None:
    h = H()
    rid, d0 = h.start(wf("s1", "s2"))
    assert ids_sent(d0) == [("s1", [])]
    h.resend(rid)
    h.giveup(rid)
    d = h.resume(rid)
    assert ids_sent(d) == [("s1_resume", ["s1"])]
    assert event(d, events.REPLAY_RESUMED)["supersedes"] == ["s1"]
    dispatched = [a for a in of(d, AuditRecord) if a.kind == "action_dispatched"]
    assert dispatched[0].data["supersedes"] == ["s1"]
    # Every copy of the resume carries them: orphan resend, agent hello.
    assert ids_sent(h.resend(rid)) == [("s1_resume", ["s1"])]
    assert ids_sent(h.hello()) == [("s1_resume", ["s1"])]
    # Resolved: forgotten; the next step supersedes nothing.
    d = h.report(rid, warning="already_executed")
    assert ids_sent(d) == [("s2", [])]
    assert h.replay(rid).supersedes == {}


def test_supersedes_leaves_out_acked_attempts_and_gathers_every_abandoned_one() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    # s1 failed (reported: known, no input), its retry was lost.
    assert ids_sent(h.report(rid, success=False, error="target_not_found")) == [
        ("s1_retry1", [])]
    h.giveup(rid)
    assert h.status(rid).pause_reason == "orphan_max_resends"
    assert ids_sent(h.resume(rid)) == [("s1_resume", ["s1_retry1"])]
    h.giveup(rid)  # lost again: two give-ups within 60 s, a dead client
    assert h.status(rid).pause_reason == "dead_client"
    assert ids_sent(h.resume(rid)) == [("s1_resume2", ["s1_retry1", "s1_resume"])]


@pytest.mark.parametrize("fields", [
    {"error": "system_dialog:uac_consent", "needs_human": True},
    {"error": "click_failed", "warning": "wrong_window"},
    {"error": "popup", "needs_human": True},
    {"error": "indeterminate_after_restart", "needs_human": True},
])
def test_resume_after_a_reported_pause_supersedes_nothing(fields: dict[str, Any]) -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    h.report(rid, success=False, **fields)
    assert ids_sent(h.resume(rid)) == [("s1_resume", [])]
    assert h.replay(rid).supersedes == {}


def test_resume_after_retries_exhausted_supersedes_nothing_even_after_a_giveup() -> None:
    h = H(DispatcherConfig(max_retries_per_action=1))
    rid, _ = h.start(wf("s1", "s2"))
    h.giveup(rid)
    assert ids_sent(h.resume(rid)) == [("s1_resume", ["s1"])]
    h.report(rid, success=False, error="target_not_found")  # s1_resume ran: known
    h.report(rid, success=False, error="target_not_found")
    assert h.status(rid).pause_reason == "target_not_found"
    assert ids_sent(h.resume(rid)) == [("s1_resume2", [])]


def test_a_step_passed_after_a_giveup_is_not_superseded_by_the_next_resume() -> None:
    # D2: a lost wait is logged and the replay goes on; the next step's resume after its
    # own give-up (a dead client now) supersedes only its own abandoned id.
    h = H()
    rid, _ = h.start(wf(act("w1", "wait"), "s2"))
    assert ids_sent(h.giveup(rid)) == [("s2", [])]
    h.giveup(rid)
    assert h.status(rid).pause_reason == "dead_client"
    assert ids_sent(h.resume(rid)) == [("s2_resume", ["s2"])]


def test_cancel_forgets_supersedes() -> None:
    h = H()
    rid, _ = h.start(wf("s1", "s2"))
    h.giveup(rid)
    h.resume(rid)
    assert h.replay(rid).supersedes == {"s1_resume": ["s1"]}
    h.cancel(rid)
    assert h.replay(rid).supersedes == {}


# Restart (case i): round trip through a real SQLite file, then recover ----------------------


def _persisted(h: H, store: DispatcherStore) -> None:
    for d in h.decisions:
        store.commit_decision(d)
    h.decisions.clear()


def test_case_i_dispatcher_restart_resends_in_flight_from_the_store(tmp_path: Path) -> None:
    h = H()
    store = DispatcherStore(tmp_path / "d.sqlite3")
    a, da = h.start(wf("s1", "s2"), session="S")
    b, _ = h.start(wf(act("p", "pause_for_human", safety_checks=CHECKS), "t2"), machine="m2")
    h.resend(a)
    _persisted(h, store)
    old_attempt = h.cur(a).attempt_id
    before = [h.status(r) for r in (a, b)]
    store.close()

    store = DispatcherStore(tmp_path / "d.sqlite3")
    h2 = H(state=store.load(), first_id=h.n, now=h.now + 10)
    assert [h2.status(r) for r in (a, b)] == before
    h2.core.check_invariants()
    d = h2.do(h2.core.recover(h2.now))
    (msg,) = sent(d)
    assert (msg.action.action_id, msg.dispatch_meta.resend_reason) == (
        "s1", "dispatcher_restarted")
    assert msg.dispatch_meta.resent_count == 2
    assert msg.dispatch_meta.first_dispatched_at == sent(da)[0].dispatch_meta.first_dispatched_at
    assert of(d, UntrackInFlight) == [UntrackInFlight("s1", old_attempt)]
    assert of(d, TrackInFlight)[0].entry.resent_count == 1  # budget: orphan resends only
    assert ack_status(h2.report(a, attempt=old_attempt)) == "stale"
    assert ack_status(h2.report(a)) == "accepted"
    assert h2.status(b).status == "paused_need_help"
    d = h2.resume(b, ["check_ipp", "check_cim10"])
    assert [m.action.action_id for m in sent(d)] == ["t2"]
    _persisted(h2, store)
    store.close()


def test_supersedes_survive_a_restart_from_the_store(tmp_path: Path) -> None:
    h = H()
    store = DispatcherStore(tmp_path / "d.sqlite3")
    rid, _ = h.start(wf("s1", "s2"))
    h.giveup(rid)
    assert ids_sent(h.resume(rid)) == [("s1_resume", ["s1"])]
    _persisted(h, store)
    store.close()

    store = DispatcherStore(tmp_path / "d.sqlite3")
    h2 = H(state=store.load(), first_id=h.n, now=h.now + 10)
    assert h2.replay(rid).supersedes == {"s1_resume": ["s1"]}
    d = h2.do(h2.core.recover(h2.now))
    assert ids_sent(d) == [("s1_resume", ["s1"])]
    _persisted(h2, store)
    store.close()


def test_a_state_stored_before_supersedes_restores_without_them() -> None:
    h = H()
    rid, _ = h.start(wf("s1"))
    r = h.replay(rid)
    m = mutable_dump(r)
    del m["supersedes"]
    mutable_restore(r, m)
    assert r.supersedes == {}


# Property: random sequences of inputs keep every invariant, across restarts ----------------

PROP_WORKFLOWS = [
    wf("a", act("b", "type"), act("c", "wait"), workflow_id="w1"),
    wf("x", act("p", "pause_for_human", safety_checks=CHECKS), act("y", "scroll"),
       workflow_id="w2"),
    wf(act("q", "pause_for_human"), act("k", "key_combo"), workflow_id="w3"),
    wf(act("w", "wait"), act("s", "scroll"), act("v", "verify_screen"), workflow_id="w4"),
]
PROP_REPORTS: list[dict[str, Any]] = [
    {}, {}, {}, {}, {}, {}, {"success": False, "error": "target_not_found"},
    {"success": False, "error": "target_not_found"},
    {"success": False, "error": "system_dialog:uac_consent"},
    {"success": False, "error": "click_failed", "warning": "wrong_window"},
    {"success": False, "error": "indeterminate_after_restart", "needs_human": True},
    {"warning": "already_executed"}, {"warning": "wrong_window"}]


class DispatcherMachine(RuleBasedStateMachine):
    """Random inputs against the core; every decision is committed to a real SQLite file."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="dispatcher-prop-"))
        self.store = DispatcherStore(self.dir / "d.sqlite3")
        self.h = H()
        self.reports: list[ActionReport] = []
        self.accepted: set[tuple[str, str]] = set()

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _pick(self, i: int, inflight: bool = False) -> str | None:
        ids = [rid for rid, r in self.h.core.replays.items()
               if not inflight or r.inflight is not None]
        return ids[i % len(ids)] if ids else None

    def _settle(self) -> None:
        """Every accepted report is a new (replay, action); then persist like the shell."""
        for d in self.h.decisions:
            if isinstance(d.reply, ReportAck) and d.reply.status == "accepted":
                rec = of(d, RecordReport)[0].report
                key = (rec.replay_id, rec.action_id)
                assert key not in self.accepted, f"{key} accepted twice"
                self.accepted.add(key)
        _persisted(self.h, self.store)

    @rule(w=st.integers(0, len(PROP_WORKFLOWS) - 1), machine=st.sampled_from(["m1", "m2"]),
          session=st.sampled_from(["S1", "S2", None, None, None]),
          mode=st.sampled_from(["supervised", "autonomous"]))
    def start(self, w: int, machine: str, session: str | None, mode: str) -> None:
        self.h.start(PROP_WORKFLOWS[w], machine=machine, mode=mode, session=session)
        self._settle()

    @rule(i=st.integers(0, 50), fields=st.sampled_from(PROP_REPORTS),
          wrong_sender=st.booleans())
    def report(self, i: int, fields: dict[str, Any], wrong_sender: bool) -> None:
        rid = self._pick(i, inflight=True)
        if rid is None:
            return
        msg = self.h.report_msg(rid, **fields)
        self.reports.append(msg)
        d = self.h.send_report(msg, sender="m9" if wrong_sender else None)
        if wrong_sender:
            assert error_code(d) == "wrong_machine"
            unchanged(d)
        self._settle()

    @rule(i=st.integers(0, 50))
    def report_success(self, i: int) -> None:
        self.report(i, {}, False)

    @rule(i=st.integers(0, 50))
    def precheck_report(self, i: int) -> None:
        rid = self._pick(i)
        if rid is not None:
            d = self.h.report(rid, action_id="precheck_wait_abc123", attempt="synthetic")
            assert ack_status(d) == "unknown"
            unchanged(d)
            self._settle()

    @rule(i=st.integers(0, 500))
    def old_report_again(self, i: int) -> None:
        if self.reports:
            d = self.h.send_report(self.reports[i % len(self.reports)])
            if ack_status(d) != "accepted":
                unchanged(d)
            self._settle()

    @rule(i=st.integers(0, 50), stale=st.booleans())
    def orphan_resend(self, i: int, stale: bool) -> None:
        rid = self._pick(i, inflight=True)
        if rid is not None:
            d = self.h.resend(rid, attempt="not-current" if stale else None)
            if stale:
                assert d.effects == [] and d.changed == set()
            self._settle()

    @rule(i=st.integers(0, 50), go=st.integers(0, 2))
    def orphan_giveup(self, i: int, go: int) -> None:
        rid = self._pick(i, inflight=True)
        if rid is not None and go == 0:
            self.h.giveup(rid)
            self._settle()

    @rule(machine=st.sampled_from(["m1", "m2", "m3"]))
    def hello(self, machine: str) -> None:
        d = self.h.hello(machine)
        assert all(m.machine_id == machine for m in sent(d))
        self._settle()

    @rule(i=st.integers(0, 50),
          acks=st.sampled_from(["required", "required", "missing", "none", "unknown"]))
    def resume(self, i: int, acks: str) -> None:
        rid = self._pick(i)
        if rid is None:
            return
        r = self.h.replay(rid)
        checks = r.pause.safety_checks if r.pause else []
        required = [c.id for c in checks if c.required]
        ids = {"required": required, "missing": required[1:], "none": [],
               "unknown": ["nope"]}[acks]
        d = self.h.resume(rid, ids)
        if isinstance(d.reply, ErrorReply):
            assert d.changed == set() and d.effects == []
        self._settle()

    @rule(i=st.integers(0, 50), go=st.integers(0, 2))
    def cancel(self, i: int, go: int) -> None:
        rid = self._pick(i)
        if rid is not None and go == 0:  # rarer, or few replays would ever complete
            self.h.cancel(rid)
            self._settle()

    @rule(i=st.integers(0, 50), go=st.integers(0, 2))
    def external_pause(self, i: int, go: int) -> None:
        rid = self._pick(i)
        if rid is not None and go == 0:
            self.h.do(self.h.core.pause(rid, "loop_detected", "Léa tourne en rond", self.h.now))
            self._settle()

    @rule(seconds=st.sampled_from([0.0, 1.0, 30.0, 61.0]))
    def tick(self, seconds: float) -> None:
        self.h.tick(seconds)

    @rule(go=st.integers(0, 3))
    def restart(self, go: int) -> None:
        """kill the dispatcher: reload what was committed, then recover."""
        if go:
            return
        before = {rid: (r.summary(), dict(r.resolved)) for rid, r in self.h.core.replays.items()}
        self.store.close()
        self.store = DispatcherStore(self.dir / "d.sqlite3")
        self.h = H(state=self.store.load(), first_id=self.h.n, now=self.h.now)
        after = {rid: (r.summary(), dict(r.resolved)) for rid, r in self.h.core.replays.items()}
        assert after == before
        self.h.core.check_invariants()
        self.h.do(self.h.core.recover(self.h.now))
        self._settle()

    @invariant()
    def invariants_hold(self) -> None:
        self.h.core.check_invariants()
        for r in self.h.core.replays.values():
            assert r.completed_actions <= r.index <= r.total


TestDispatcherProperties = DispatcherMachine.TestCase
TestDispatcherProperties.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.long
def test_dispatcher_properties_long() -> None:
    run_state_machine_as_test(DispatcherMachine, settings=settings(  # type: ignore[no-untyped-call]
        max_examples=2000, stateful_step_count=80, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))
