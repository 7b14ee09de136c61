"""The dispatcher core with a run's outputs: a read_text step's value is kept only when it
fits the step, put into later steps only in what is sent, masked in whatever is recorded
or shown when sensitive, kept across a restart; a wrong value or a value never read
pauses before anything uses it (docs/protocol.md, "Outputs")."""

from __future__ import annotations

import json
from typing import Any

from actors.dispatcher.machine.decision import AuditRecord
from actors.dispatcher.machine.state import mutable_dump, mutable_restore
from messages.replay import ResumeReplay
from messages.workflow import Workflow
from tests.unit.test_dispatcher_core import H, of, sent
from tests.unit.test_dispatcher_inputs import shown

SEJOUR = "2026-004217"


def letter(sensitive: bool = False) -> Workflow:
    return Workflow.model_validate({"workflow_id": "letter", "actions": [
        {"action_id": "read", "type": "read_text",
         "parameters": {"output": "sejour", "label": "N° de séjour",
                        "pattern": r"\d{4}-\d{6}", "sensitive": sensitive}},
        {"action_id": "type", "type": "type",
         "parameters": {"text": "Séjour {{outputs.sejour}}"}},
        {"action_id": "check", "type": "pause_for_human",
         "parameters": {"message": "Le séjour {{outputs.sejour}} est-il le bon ?"}}]})


def read(h: H, sensitive: bool = False, **report: Any) -> tuple[str, Any]:
    rid, d = h.start(letter(sensitive))
    (dispatch,) = sent(d)
    assert dispatch.action.type == "read_text"
    return rid, h.report(rid, **report)


def audited(decision: Any, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in of(decision, AuditRecord) if e.kind == kind]


def test_a_value_read_is_kept_and_typed_by_the_next_step() -> None:
    h = H()
    rid, d = read(h, output_value=SEJOUR, input_performed="none")
    (typing,) = sent(d)
    assert typing.action.parameters["text"] == f"Séjour {SEJOUR}"
    assert h.cur(rid).action.parameters["text"] == "Séjour {{outputs.sejour}}"  # kept as is
    (record,) = audited(d, "output_read")
    assert (record["output"], record["value"]) == ("sejour", SEJOUR)
    assert h.replay(rid).summary().outputs == {"sejour": SEJOUR}
    # A dispatcher restarted from its store has the value still.
    r = h.replay(rid)
    mutable_restore(r, json.loads(json.dumps(mutable_dump(r))))
    assert r.outputs == {"sejour": SEJOUR}


def test_a_sensitive_value_is_typed_and_shown_nowhere() -> None:
    h = H()
    rid, d = read(h, sensitive=True, output_value=SEJOUR, input_performed="none",
                  target_description=f"read {SEJOUR}")
    (typing,) = sent(d)
    assert typing.action.parameters["text"] == f"Séjour {SEJOUR}"
    (record,) = audited(d, "output_read")
    assert record["value"] == "•••"
    reported = h.report(rid, target_description=f"typed {SEJOUR}")
    assert SEJOUR not in shown(d) + shown(reported)
    summary = h.replay(rid).summary()
    assert summary.outputs == {"sejour": "•••"}
    assert summary.pause_message == "Le séjour ••• est-il le bon ?"


def test_a_value_against_the_pattern_pauses_and_nothing_is_typed() -> None:
    h = H()
    # Whatever the agent said (an older one, or one that did not judge): judged here.
    rid, d = read(h, output_value="2026-0042", input_performed="none")
    assert sent(d) == []
    summary = h.replay(rid).summary()
    assert summary.status == "paused_need_help" and summary.pause_reason == "output_invalid"
    assert "2026-0042" in (summary.pause_message or "") and summary.outputs == {}
    assert audited(d, "output_read") == []


def test_a_sensitive_wrong_value_is_masked_in_the_pause() -> None:
    h = H()
    rid, d = read(h, sensitive=True, success=False, error="output_invalid", needs_human=True,
                  output_value="9999-1", target_description="9999-1 does not fit")
    assert "9999-1" not in shown(d)
    assert h.replay(rid).summary().pause_reason == "output_invalid"


def test_nothing_read_pauses_and_the_resume_reads_again() -> None:
    h = H()
    rid, _ = read(h, input_performed="none")  # success, but no value: never kept
    assert h.replay(rid).summary().pause_reason == "output_invalid"
    (again,) = sent(h.resume(rid))
    assert again.action.type == "read_text" and again.action.action_id == "read_resume"


def test_a_step_whose_value_was_never_read_is_not_sent() -> None:
    h = H()
    rid, _ = read(h, success=False, error="output_invalid", needs_human=True,
                  input_performed="none")
    # The person says the reading step was done: the value is still unknown.
    d = h.do(h.core.resume(_resume_done(rid), h.now))
    assert sent(d) == []
    summary = h.replay(rid).summary()
    assert summary.pause_reason == "output_missing", summary
    assert summary.queue_head[0] == "type"
    # Resuming again does not send it with an empty value either.
    assert sent(h.resume(rid)) == []
    assert h.replay(rid).summary().pause_reason == "output_missing"


def _resume_done(rid: str) -> ResumeReplay:
    return ResumeReplay(replay_id=rid, operator="bob", step="done")


def test_the_end_of_the_run_says_what_it_read() -> None:
    h = H()
    rid, _ = h.start(Workflow.model_validate({"workflow_id": "w", "actions": [
        {"action_id": "read", "type": "read_text",
         "parameters": {"output": "sejour", "region": {"x_pct": 0, "y_pct": 0, "w_pct": 1,
                                                       "h_pct": 0.1}}},
        {"action_id": "ipp", "type": "read_text",
         "parameters": {"output": "ipp", "label": "IPP", "sensitive": True}}]}))
    h.report(rid, output_value=SEJOUR, input_performed="none")
    done = h.report(rid, output_value="004217", input_performed="none")
    (record,) = audited(done, "replay_completed")
    assert record["outputs"] == {"sejour": SEJOUR, "ipp": "•••"}
