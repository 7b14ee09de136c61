"""The dispatcher core with a run's inputs: refused before a replay exists when they do
not fit, substituted only in what is sent, masked in whatever is recorded or shown, kept
across a restart (docs/protocol.md, "Inputs")."""

from __future__ import annotations

import json
from typing import Any

from actors.dispatcher.machine.decision import AuditRecord, Notify, PublishEvent, RecordReport
from actors.dispatcher.machine.state import mutable_dump, mutable_restore
from messages.control import ErrorReply
from messages.replay import StartReplay
from messages.workflow import Workflow
from tests.unit.test_dispatcher_core import H, of, sent

IPP = "739164"


def note() -> Workflow:
    return Workflow.model_validate({"workflow_id": "note", "inputs": [
        {"name": "ipp", "pattern": r"\d{6}", "sensitive": True}, {"name": "champ"}],
        "actions": [
            {"action_id": "search", "type": "type", "target_spec": {"by_text": "{{champ}}"},
             "parameters": {"text": "IPP {{ipp}}"}},
            {"action_id": "check", "type": "pause_for_human",
             "parameters": {"message": "Le dossier {{ipp}} est-il ouvert ?"}}]})


def start(h: H, values: dict[str, str]) -> Any:
    return h.do(h.core.start(StartReplay(workflow=note(), machine_id="m1", inputs=values),
                             h.now))


def shown(decision: Any) -> str:
    """Everything a decision records, publishes or shows, as one text."""
    parts: list[Any] = [e.data for e in of(decision, PublishEvent)]
    parts += [e.data for e in of(decision, AuditRecord)]
    parts += [e.report.model_dump(mode="json") for e in of(decision, RecordReport)]
    parts += [e.message.model_dump(mode="json") for e in of(decision, Notify)]
    if decision.reply is not None:
        parts.append(decision.reply.model_dump(mode="json"))
    return json.dumps(parts, ensure_ascii=False, default=str)


def test_values_that_do_not_fit_create_no_replay() -> None:
    h = H()
    d = start(h, {"ipp": "12AB", "champ": "Recherche"})
    assert isinstance(d.reply, ErrorReply) and d.reply.code == "invalid_inputs"
    assert d.reply.detail["problems"] == [r"ipp: ••• does not match the pattern '\\d{6}'"]
    assert h.core.replays == {} and d.effects == []


def test_the_agent_gets_the_values_nothing_else_shows_the_sensitive_one() -> None:
    h = H()
    d = start(h, {"ipp": IPP, "champ": "Recherche"})
    rid = d.reply.replay_id
    (dispatch,) = sent(d)
    assert dispatch.action.parameters["text"] == f"IPP {IPP}"
    assert dispatch.action.target_spec is not None
    assert dispatch.action.target_spec.by_text == "Recherche"
    assert h.cur(rid).action.parameters["text"] == "IPP {{ipp}}"  # kept with placeholders
    # The agent echoes the value it typed: masked before anything keeps or shows it.
    reported = h.report(rid, target_description=f"IPP {IPP}",
                        target_spec={"by_text": f"IPP {IPP}"})
    assert IPP not in shown(d) + shown(reported)
    summary = h.replay(rid).summary()
    assert summary.pause_message == "Le dossier ••• est-il ouvert ?"
    # A dispatcher restarted from its store sends the same values.
    r = h.replay(rid)
    mutable_restore(r, json.loads(json.dumps(mutable_dump(r))))
    assert r.inputs == {"ipp": IPP, "champ": "Recherche"}
