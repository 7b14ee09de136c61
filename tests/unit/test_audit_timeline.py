"""``audit show``'s text form: what a reviewer must be able to read, from records shaped as the
dispatcher and the supervisor write them (their data as stored, nothing made up)."""

from __future__ import annotations

from typing import Any

from actors.dispatcher.audit_records import audit_record
from actors.dispatcher.machine.decision import AuditRecord
from cli.audit_timeline import describe_record
from messages.audit import AuditRecordOut

PROMPT = "Tu es Léa, une assistante qui rejoue un workflow hospitalier. " * 30


def shown(kind: str, data: dict[str, Any], source: str = "dispatcher",
          screenshots: dict[str, str] | None = None) -> list[str]:
    """The lines ``audit show`` prints for a dispatcher record built by the shell's code."""
    if source == "dispatcher":
        record = audit_record("s", 1, AuditRecord(kind, {"at": 1.0, **data}))
        data = record.data
    out = AuditRecordOut(seq=7, record_id="x:1", source=source, kind=kind, replay_id="r1",
                         at=1.0, stored_at=1.0, data=data, screenshots=screenshots or {},
                         screenshot_state={}, prev_hash="0" * 64, hash="1" * 64)
    return describe_record(out).splitlines()


def ids(**extra: Any) -> dict[str, Any]:
    return {"replay_id": "r1", "session_id": "sess", "machine_id": "M1", **extra}


def test_a_safety_pause_shows_each_check_its_evidence_and_the_model_exchange() -> None:
    checks = [
        {"id": "chk_identity", "label": "Identité vérifiée", "required": True,
         "source": "declarative", "evidence": None},
        {"id": "llm_1", "label": "Contrôler la date", "required": False,
         "source": "llm_contextual", "evidence": "La date affichée est 01/01/1900."}]
    lines = shown("replay_paused", ids(
        action_id="step_check", reason="user_request", message="Vérifiez le patient.",
        resume_action=None, safety_checks=checks, detail={
            "safety_level": "medical_critical", "llm_status": "ok", "checks": 2,
            "source": "safety_checks", "llm": {
                "model": "medgemma:4b", "url": "http://127.0.0.1:1", "latency_ms": 90.2,
                "image_sha256": "ab" * 32, "prompt": PROMPT, "error": None,
                "raw_answer": '{"additional_checks": [{"label": "Contrôler la date"}]}',
                "dropped": []}}))
    head, *more = lines
    assert "replay_paused" in head and "step_check" in head and "reason=user_request" in head
    assert "checks: chk_identity(declarative), llm_1?(llm_contextual)" in head
    assert "checks=2" not in head and "M1" not in head  # said already / in replay_started
    assert "llm_status=ok" in head and "safety_level=medical_critical" in head
    assert any("check chk_identity REQUIRED [declarative] Identité vérifiée" in m for m in more)
    assert any("check llm_1 optional [llm_contextual] Contrôler la date — evidence: La date "
               "affichée est 01/01/1900." in m for m in more)
    assert any("model medgemma:4b" in m and "screen abababababab" in m for m in more)
    prompt_line = next(m for m in more if "prompt" in m)
    assert f"({len(PROMPT)} chars)" in prompt_line and prompt_line.endswith("…")
    assert any('answer: {"additional_checks": [{"label": "Contrôler la date"}]}' in m
               for m in more)
    assert all(m.startswith(" ") for m in more)


def test_a_loop_pause_shows_the_signal_and_its_evidence_and_the_whole_message() -> None:
    message = ("Léa semble bloquée — retry_threshold (action_id=s4, retries=3, threshold=3, "
               "error=target_not_found)")
    head, *more = shown("replay_paused", ids(
        reason="loop_detected", message=message, safety_checks=[], resume_action=None,
        detail={"signal": "retry_threshold", "reason": "loop_detected",
                "evidence": {"action_id": "s4", "retries": 3}}))
    assert "signal=retry_threshold" in head and head.count("loop_detected") == 1
    assert "evidence.action_id=s4" in head and "evidence.retries=3" in head
    assert more == [" " * 10 + f"message: {message}"]


def test_a_resume_shows_the_operator_and_what_was_acknowledged() -> None:
    (head,) = shown("replay_resumed", ids(
        reason="user_request", acknowledged_check_ids=["chk_identity", "chk_note"],
        operator="dr.who", resume_action_id=None, supersedes=[]))
    assert "operator=dr.who" in head and "acknowledged: chk_identity, chk_note" in head
    assert "supersedes" not in head


def test_a_report_shows_its_outcome_how_the_target_was_found_and_its_screens() -> None:
    report = {"replay_id": "r1", "action_id": "s1", "attempt_id": "ab" * 16,
              "machine_id": "M1", "success": True, "error": None, "warning": None,
              "resolution_method": "anchor", "resolution_score": 0.93,
              "actual_position": {"x_pct": 0.12, "y_pct": 0.08}, "needs_human": False,
              "screenshot_before": b"\x89PNG-before", "screenshot_after": b"\x89PNG-after"}
    record = audit_record("s", 1, AuditRecord("report_received", {
        "at": 1.0, "status": "accepted", "sender_machine": "M1", "report": report}))
    (head,) = shown("report_received", record.data,
                    screenshots={"after": "c" * 64, "before": "d" * 64})
    assert "s1  attempt abababab  status=accepted  ok  found by anchor 0.93  at (0.12, 0.08)" \
        in head
    assert head.endswith(f"before={'d' * 12}  after={'c' * 12}")
    assert "sender_machine" not in head and "needs_human" not in head
    (forged,) = shown("report_received", {**record.data, "sender_machine": "M2"})
    assert "SENT BY M2 (report says M1)" in forged


def test_a_text_target_shows_the_box_it_was_read_in() -> None:
    from console.labels import happening

    report = {"replay_id": "r1", "action_id": "s1", "attempt_id": "ab" * 16,
              "machine_id": "M1", "success": True, "resolution_method": "ocr",
              "resolution_score": 1.0, "actual_position": {"x_pct": 0.5, "y_pct": 0.25},
              "resolution_box": {"x": 1455.0, "y": 133.0, "w": 80.0, "h": 15.0},
              "target_description": "read 'Enregistrer'"}
    data = {"status": "accepted", "sender_machine": "M1", "report": report}
    (head,) = shown("report_received", data)
    assert "found by ocr 1.00  at (0.5, 0.25)  box (1455,133 80x15)" in head
    assert "read 'Enregistrer'" in head
    assert happening("report_received", data) == \
        "Étape s1 faite (cible : ocr 1.00, zone (1455,133 80x15))"


def test_a_refused_report_names_who_sent_it_and_who_should_have() -> None:
    (head,) = shown("report_refused", {
        "replay_id": "r1", "action_id": "s1", "attempt_id": "ab" * 16,
        "sender_machine": "M2", "claimed_machine": "M1", "expected_machine": "M1"})
    assert "report_refused" in head and "s1  attempt abababab" in head
    assert "sender_machine=M2  claimed_machine=M1  expected_machine=M1" in head


def test_a_dispatch_says_a_resend_and_a_first_dispatch_does_not() -> None:
    first = ids(action_id="s1", attempt_id="ab" * 16, action_type="click", resent_count=0,
                resend_reason=None, monitor_resolution={"idx": 1, "source": "action"})
    (head,) = shown("action_dispatched", first)
    assert "resent" not in head and "monitor 1 (action)" in head
    (again,) = shown("action_resent", {**first, "resent_count": 2,
                                       "resend_reason": "orphan_timeout"})
    assert "resent #2" in again and "resend_reason=orphan_timeout" in again


def test_supervisor_records_read_as_what_happened_to_which_actor() -> None:
    (head,) = shown("actor_exited", {"name": "audit_log", "pid": 42, "exit_code": None,
                                     "signal": "SIGKILL", "reason": "signal"}, "supervisor")
    assert "[supervisor]" in head and "name=audit_log" in head and "signal=SIGKILL" in head
    (counts,) = shown("replay_completed", ids(completed_actions=9, total=9, counters={
        "dispatched": 12, "pauses": 3}))
    assert "counters.dispatched=12  counters.pauses=3" in counts
