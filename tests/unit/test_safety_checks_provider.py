"""build_pause_payload (docs/screens-and-pauses.md), against a real HTTP server on 127.0.0.1
that answers like Ollama's /api/generate (cli/ollama_stub.py), well or badly on purpose."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from actors.safety_checks.core import (
    SafetyChecksConfig,
    build_pause_payload,
    events_for,
)
from actors.safety_checks.llm import LlmQuery, LlmReply, answer_schema, normalised
from actors.safety_checks.ollama import OllamaClient
from cli.ollama_stub import GOOD_CHECKS, OllamaStub
from messages import events
from messages.safety_checks import BuildPausePayload, PausePayload, ReplayContext
from messages.workflow import Action
from tests.conftest import free_port
from workflow.safety_rules import LLM_UNAVAILABLE_CHECK_ID, declared_checks

SCREEN = b"\x89PNG\r\n\x1a\n" + bytes(range(256))  # what the model gets; never decoded here
CONTEXT = ReplayContext(workflow_id="admission_note", workflow_name="Note d'admission",
                        index=6, total=9)
DECL = [{"id": "c1", "label": "Vérifier IPP", "required": True}]


@pytest.fixture(autouse=True)
def _spec_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets what it needs; nothing leaks in from the environment."""
    for name in ("RPA_SAFETY_CHECKS_LLM_ENABLED", "RPA_SAFETY_CHECKS_LLM_MODEL",
                 "RPA_SAFETY_CHECKS_LLM_TIMEOUT_S", "RPA_SAFETY_CHECKS_LLM_MAX_CHECKS",
                 "RPA_SAFETY_CHECKS_LLM_FAIL_MODE", "OLLAMA_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def stub() -> Iterator[OllamaStub]:
    with OllamaStub("good") as server:
        yield server


def action(safety_level: str | None = None, checks: list[Any] | None = None,
           message: str = "Validation") -> Action:
    params: dict[str, Any] = {"message": message}
    if safety_level:
        params["safety_level"] = safety_level
    if checks is not None:
        params["safety_checks"] = checks
    return Action.model_validate({"action_id": "p", "type": "pause_for_human",
                                  "parameters": params})


def build(stub: OllamaStub, a: Action, screen: bytes | None = SCREEN, **config: Any
          ) -> PausePayload:
    cfg = SafetyChecksConfig(**{"llm_timeout_s": 1.0, **config})
    return build_pause_payload(a, CONTEXT, screen, OllamaClient(stub.url), cfg)


# The 7 cases of the origin plan -------------------------------------------------------------

def test_only_declarative_when_no_safety_level(stub: OllamaStub) -> None:
    p = build(stub, action(checks=DECL))
    assert [(c.id, c.source, c.evidence) for c in p.checks] == [("c1", "declarative", None)]
    assert (p.llm_status, p.llm) == ("not_requested", None)
    assert stub.received() == []


def test_hybrid_appends_llm_checks_on_medical_critical(stub: OllamaStub) -> None:
    p = build(stub, action("medical_critical", DECL))
    assert [(c.id, c.source, c.required) for c in p.checks] == [
        ("c1", "declarative", True), ("llm_1", "llm_contextual", False),
        ("llm_2", "llm_contextual", False)]
    assert [(c.label, c.evidence) for c in p.checks[1:]] == [
        (g["label"], g["evidence"]) for g in GOOD_CHECKS]
    assert p.llm_status == "ok" and p.llm is not None and p.llm.error is None
    (sent,) = stub.received()
    assert p.llm.raw_answer is not None and "additional_checks" in p.llm.raw_answer
    assert p.llm.prompt == sent["prompt"] and "Vérifier IPP" in sent["prompt"]


def test_llm_timeout_falls_back_to_declarative_only(stub: OllamaStub) -> None:
    stub.set("slow", delay_s=3.0)
    p = build(stub, action("medical_critical", DECL), llm_timeout_s=0.5)
    assert [c.id for c in p.checks] == ["c1"]
    assert p.llm_status == "failed" and p.llm is not None and p.llm.error == "timeout"
    assert len(stub.received()) == 1  # it was asked, and did not answer in time


def test_llm_invalid_response_falls_back(stub: OllamaStub) -> None:
    stub.set("non_json")
    p = build(stub, action("medical_critical", []))
    assert [c.id for c in p.checks] == ["confirm_step"]  # no check declared: the system's
    assert p.llm is not None and p.llm.error == "invalid_json"
    assert p.llm.raw_answer == "Je pense que tout est correct, vous pouvez continuer."


def test_kill_switch_disables_llm_call(stub: OllamaStub, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    monkeypatch.setenv("RPA_SAFETY_CHECKS_LLM_ENABLED", "0")
    monkeypatch.setenv("OLLAMA_URL", stub.url)
    cfg = SafetyChecksConfig()
    p = build_pause_payload(action("medical_critical", [{"id": "c1", "label": "X"}]), CONTEXT,
                            SCREEN, OllamaClient(cfg.ollama_url), cfg)
    assert [c.id for c in p.checks] == ["c1"] and (p.llm_status, p.llm) == ("disabled", None)
    assert stub.requests == []  # no request of any kind reached the server


def test_max_checks_respected(stub: OllamaStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RPA_SAFETY_CHECKS_LLM_MAX_CHECKS", "2")
    stub.set("many")
    cfg = SafetyChecksConfig()
    p = build_pause_payload(action("medical_critical", []), CONTEXT, SCREEN,
                            OllamaClient(stub.url), cfg)
    assert [c.label for c in p.checks if c.source == "llm_contextual"] == [
        "Vérification contextuelle 1", "Vérification contextuelle 2"]
    assert p.llm is not None and [d.why for d in p.llm.dropped] == ["over_max"] * 3
    assert "de 0 à 2 vérifications" in stub.received()[0]["prompt"]


def test_empty_declarative_with_llm_returns_the_confirm_check_and_llm(stub: OllamaStub
                                                                      ) -> None:
    """A medical_critical pause declaring no check gets one required system check (issue
    15): the model's suggestions are never required, a person must still confirm."""
    p = build(stub, action("medical_critical", []))
    assert [(c.id, c.source, c.required) for c in p.checks] == [
        ("confirm_step", "system", True), ("llm_1", "llm_contextual", False),
        ("llm_2", "llm_contextual", False)]


def test_declared_optional_checks_only_get_the_confirm_check_too(stub: OllamaStub) -> None:
    p = build(stub, action("medical_critical", [{"id": "confirm_step", "label": "X",
                                                 "required": False}]))
    assert [(c.id, c.required) for c in p.checks][:2] == [("confirm_step", False),
                                                          ("confirm_step_2", True)]


def test_a_standard_pause_gets_no_confirm_check(stub: OllamaStub) -> None:
    assert build(stub, action("standard", [])).checks == []


# What was sent -------------------------------------------------------------------------------

def test_the_schema_goes_in_format_and_the_screenshot_in_images(stub: OllamaStub) -> None:
    build(stub, action("medical_critical", DECL), llm_model="medgemma:4b")
    (sent,) = stub.received()
    assert sent["format"] == answer_schema()
    assert sent["format"]["required"] == ["additional_checks"]
    assert sent["images"] == [base64.b64encode(SCREEN).decode()]
    assert (sent["model"], sent["stream"]) == ("medgemma:4b", False)


def test_the_audit_block_names_the_screenshot_by_its_hash(stub: OllamaStub) -> None:
    p = build(stub, action("medical_critical", DECL))
    assert p.llm is not None and p.llm.image_sha256 == hashlib.sha256(SCREEN).hexdigest()
    assert p.llm.url == stub.url and p.llm.latency_ms > 0


def test_no_screenshot_no_request(stub: OllamaStub) -> None:
    """A vision model cannot look at a screen it is not given: nothing is sent."""
    p = build(stub, action("medical_critical", DECL), screen=None)
    assert p.llm is not None and p.llm.error == "no_screenshot"
    assert [c.id for c in p.checks] == ["c1"] and stub.requests == []


# Every failure: no LLM check, the pause still gets its payload ------------------------------

@pytest.mark.parametrize(("mode", "cause"), [
    ("http_500", "http_error"), ("non_json", "invalid_json"), ("bad_body", "invalid_response"),
    ("schema", "schema_violation"), ("trickle", "timeout"), ("hang", "timeout"),
])
def test_each_failure_gives_no_llm_check_and_names_its_cause(stub: OllamaStub, mode: str,
                                                             cause: str) -> None:
    stub.set(mode, interval_s=0.05)  # trickle: the whole body would take ~20 s
    # The answers that fail at once get a deadline a loaded machine cannot miss; those that
    # must time out, a short one.
    p = build(stub, action("medical_critical", DECL),
              llm_timeout_s=0.6 if cause == "timeout" else 5.0)
    assert [c.id for c in p.checks] == ["c1"]
    assert p.llm_status == "failed" and p.llm is not None and p.llm.error == cause
    assert p.llm.error_detail


def test_connection_refused() -> None:
    cfg = SafetyChecksConfig(llm_timeout_s=2.0)
    p = build_pause_payload(action("medical_critical", DECL), CONTEXT, SCREEN,
                            OllamaClient(f"http://127.0.0.1:{free_port()}"), cfg)
    assert [c.id for c in p.checks] == ["c1"]
    assert p.llm is not None and p.llm.error == "unreachable"


def test_closed_fail_mode_adds_one_required_system_check(stub: OllamaStub) -> None:
    stub.set("http_500")
    p = build(stub, action("medical_critical", DECL), llm_fail_mode="closed")
    assert [(c.id, c.source, c.required) for c in p.checks] == [
        ("c1", "declarative", True), (LLM_UNAVAILABLE_CHECK_ID, "system", True)]
    assert p.checks[1].evidence is not None and "http_error" in p.checks[1].evidence


def test_closed_fail_mode_adds_nothing_when_the_model_answers(stub: OllamaStub) -> None:
    p = build(stub, action("medical_critical", DECL), llm_fail_mode="closed")
    assert "system" not in {c.source for c in p.checks} and len(p.checks) == 3


def test_a_check_repeating_a_declared_one_is_dropped(stub: OllamaStub) -> None:
    decl = [{"id": "c1", "label": "Vérifier l'IPP du patient"},
            {"id": "c2", "label": "Confirmer le code CIM-10"}]
    stub.set("repeat_declared")
    p = build(stub, action("medical_critical", decl))
    assert [c.id for c in p.checks] == ["c1", "c2", "llm_1"]
    assert p.checks[2].label == GOOD_CHECKS[0]["label"]
    assert p.llm is not None
    assert [(d.label, d.why) for d in p.llm.dropped] == [
        ("VERIFIER L'IPP DU PATIENT !", "repeats_declared"),
        ("CONFIRMER LE CODE CIM-10 !", "repeats_declared")]


def test_llm_ids_never_collide_with_declared_ones(stub: OllamaStub) -> None:
    decl = [{"id": "llm_1", "label": "A"}, {"id": "llm_2", "label": "B"}]
    p = build(stub, action("medical_critical", decl))
    ids = [c.id for c in p.checks]
    assert len(ids) == len(set(ids)) == 4 and ids[:2] == ["llm_1", "llm_2"]


def test_repeated_llm_labels_count_once(stub: OllamaStub) -> None:
    stub.set(checks=[{"label": "Vérifier la dose", "evidence": "a"},
                     {"label": "verifier la DOSE.", "evidence": "b"}])
    p = build(stub, action("medical_critical", []))
    assert [c.evidence for c in p.checks if c.source == "llm_contextual"] == ["a"]


def test_no_time_left_means_no_request(stub: OllamaStub) -> None:
    cfg = SafetyChecksConfig(llm_timeout_s=5.0)
    p = build_pause_payload(action("medical_critical", DECL), CONTEXT, SCREEN,
                            OllamaClient(stub.url), cfg, budget_s=0.0)
    assert p.llm is not None and p.llm.error == "timeout" and stub.requests == []


# Declarative normalisation ------------------------------------------------------------------

def test_declared_checks_default_required_and_keep_their_order() -> None:
    checks = declared_checks(action(checks=[{"id": "a", "label": "A"},
                                            {"id": "b", "label": "B", "required": False}]))
    assert [(c.id, c.required, c.source, c.evidence) for c in checks] == [
        ("a", True, "declarative", None), ("b", False, "declarative", None)]


def test_a_lone_action_is_taken_leniently_but_never_loses_a_check() -> None:
    """A Workflow refuses these shapes (test_workflow_safety_dsl.py); an Action that did not
    come through one still shows every check, with unique ids, required unless False."""
    a = action(checks=["Vérifier le patient", {"label": "sans id"}, {"id": "x"},
                       {"id": "x", "label": "bis"}, {"id": "y", "label": "Y",
                                                     "required": "maybe"}])
    assert [(c.id, c.label, c.required) for c in declared_checks(a)] == [
        ("check_1", "Vérifier le patient", True), ("check_2", "sans id", True),
        ("x", "x", True), ("x_4", "bis", True), ("y", "Y", True)]


def test_the_closed_check_id_never_takes_a_declared_one(stub: OllamaStub) -> None:
    stub.set("http_500")
    p = build(stub, action("medical_critical", [{"id": LLM_UNAVAILABLE_CHECK_ID, "label": "Z"}]),
              llm_fail_mode="closed")
    assert [c.id for c in p.checks] == [LLM_UNAVAILABLE_CHECK_ID,
                                        f"{LLM_UNAVAILABLE_CHECK_ID}_2"]


def test_labels_compare_without_case_accents_or_punctuation() -> None:
    assert normalised("Vérifier  l'IPP patient !") == normalised("VERIFIER L IPP PATIENT")
    assert normalised("Vérifier la dose") != normalised("Vérifier la date")


def test_the_pause_message_falls_back_to_the_intention() -> None:
    a = Action.model_validate({"action_id": "p", "type": "pause_for_human",
                               "intention": "Contrôle humain"})
    p = build_pause_payload(a, CONTEXT, None, None, SafetyChecksConfig())
    assert (p.message, p.pause_reason, p.checks) == ("Contrôle humain", "user_request", [])


# Events ------------------------------------------------------------------------------------

def _request(a: Action) -> BuildPausePayload:
    return BuildPausePayload(replay_id="r1", session_id="s1", machine_id="m1",
                             mode="supervised", action=a, context=CONTEXT)


def test_events_of_a_good_answer(stub: OllamaStub) -> None:
    a = action("medical_critical", DECL)
    out = events_for(_request(a), build(stub, a))
    assert [t for t, _ in out] == [events.SAFETY_CHECKS_GENERATED]
    data = out[0][1]
    assert (data["count"], data["sources"], data["replay_id"], data["action_id"]) == (
        3, ["declarative", "llm_contextual", "llm_contextual"], "r1", "p")


def test_events_of_a_failure(stub: OllamaStub) -> None:
    stub.set("schema")
    a = action("medical_critical", DECL)
    out = dict(events_for(_request(a), build(stub, a, llm_fail_mode="closed")))
    failed = out[events.SAFETY_CHECKS_LLM_FAILED]
    assert (failed["cause"], failed["fail_mode"], failed["replay_id"]) == (
        "schema_violation", "closed", "r1")
    assert out[events.SAFETY_CHECKS_GENERATED]["sources"] == ["declarative", "system"]


def test_a_client_that_raises_is_a_failure_not_a_crash() -> None:
    """Whatever a model client raises (a library bug), the pause keeps its checks."""

    class Broken:
        url = "http://127.0.0.1:1"

        def generate(self, query: LlmQuery) -> LlmReply:
            raise RuntimeError("boom")

    p = build_pause_payload(action("medical_critical", DECL), CONTEXT, SCREEN, Broken(),
                            SafetyChecksConfig())
    assert [c.id for c in p.checks] == ["c1"]
    assert p.llm is not None and p.llm.error == "client_error" and "boom" in str(
        p.llm.error_detail)
