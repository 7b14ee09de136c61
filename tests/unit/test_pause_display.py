"""What a person sees of a pause: ``replay status`` (cli/replay_cmd.py) and the demo's
terminal checklist (cli/demo.py), which refuses to go on until every required check is done."""

from __future__ import annotations

import io

from cli.demo import ask_checks, narrate
from cli.replay_cmd import describe
from messages import events
from messages.events import Event
from messages.replay import ReplaySummary, SafetyCheck

CHECKS = [
    SafetyCheck(id="chk_identity", label="Identité du patient vérifiée"),
    SafetyCheck(id="chk_note", label="Note relue", required=False),
    SafetyCheck(id="llm_1", label="Contrôler la date d'admission", required=False,
                source="llm_contextual", evidence="01/01/1900 affiché"),
    SafetyCheck(id="llm_unavailable", label="Vérifiez vous-même l'écran", source="system",
                evidence="timeout: no complete answer within 5.0 s"),
]


def paused(checks: list[SafetyCheck], message: str = "Vérifiez le patient.") -> ReplaySummary:
    return ReplaySummary(
        replay_id="r1", session_id="s1", machine_id="PC-1", workflow_id="admission_note",
        mode="supervised", status="paused_need_help", index=6, total=9, completed_actions=6,
        pause_reason="user_request", pause_message=message, safety_checks=checks,
        created_at=0.0, updated_at=0.0)


def test_status_shows_reason_message_and_each_check_with_source_need_and_evidence() -> None:
    text = describe(paused(CHECKS, "Vérifiez le patient.\nPuis la note."))
    lines = text.splitlines()
    assert "  paused: user_request (the workflow asks a person to check before going on)" in (
        lines)
    assert "    Vérifiez le patient." in lines and "    Puis la note." in lines
    assert "  checks to acknowledge (2 required of 4):" in lines
    assert "    [ ] chk_identity     REQUIRED  [workflow]  Identité du patient vérifiée" in lines
    assert "    [ ] chk_note         optional  [workflow]  Note relue" in lines
    assert ("    [ ] llm_1            optional  [Léa, suggestion]  "
            "Contrôler la date d'admission") in lines
    assert "          Léa saw: 01/01/1900 affiché" in lines
    assert "    [ ] llm_unavailable  REQUIRED  [system]  Vérifiez vous-même l'écran" in lines
    assert "          why: timeout: no complete answer within 5.0 s" in lines
    assert lines[-1] == ("  once checked: python run.py replay resume r1 --ack chk_identity "
                         "--ack llm_unavailable --operator NAME")


def test_status_of_a_pause_without_checks_is_the_plain_bubble() -> None:
    text = describe(paused([]))
    assert "checks to acknowledge" not in text and "[ ]" not in text
    assert text.splitlines()[-1] == "  resume: python run.py replay resume r1 --operator NAME"


def test_the_demo_asks_again_for_a_required_check_until_it_is_done() -> None:
    answers = io.StringIO("n\nn\ny\nn\nyes\noui\n")
    out = io.StringIO()
    acked = ask_checks(paused(CHECKS), answers, out)
    assert acked == ["chk_identity", "llm_1", "llm_unavailable"]
    shown = out.getvalue()
    assert shown.count("[?] chk_identity     REQUIRED") == 3  # asked until done
    assert shown.count("This check is REQUIRED: Léa will not continue until it is done.") == 2
    assert shown.count("[?] chk_note         optional") == 1  # an optional "no" is accepted
    assert ("[?] llm_1            optional  [Léa, suggestion]  Contrôler la date d'admission"
            in shown)
    assert "Léa saw: 01/01/1900 affiché" in shown
    assert "  [x] chk_identity\n  [ ] chk_note\n  [x] llm_1\n  [x] llm_unavailable" in shown
    assert "paused: user_request" in shown and "Vérifiez le patient." in shown


def test_the_demo_stops_rather_than_continue_when_input_ends() -> None:
    try:
        ask_checks(paused(CHECKS[:1]), io.StringIO("n\n"), io.StringIO())
    except EOFError:
        return
    raise AssertionError("a required check was passed without a yes")


def test_the_demo_without_checks_waits_for_enter() -> None:
    out = io.StringIO()
    assert ask_checks(paused([]), io.StringIO("\n"), out) == []
    assert "Press Enter to let Léa continue" in out.getvalue()


def test_the_demo_narrates_the_checklist_events() -> None:
    generated = Event(topic=events.SAFETY_CHECKS_GENERATED, source="safety_checks", at=0.0,
                      data={"action_id": "p", "count": 3,
                            "sources": ["declarative", "llm_contextual", "llm_contextual"]})
    failed = Event(topic=events.SAFETY_CHECKS_LLM_FAILED, source="safety_checks", at=0.0,
                   data={"action_id": "p", "cause": "timeout", "detail": "no answer"})
    assert narrate(generated) == "☑ checklist for p: 3 check(s), 2 suggested by Léa"
    assert narrate(failed) == "⚠ Léa could not look at the screen for p (timeout): no answer"
