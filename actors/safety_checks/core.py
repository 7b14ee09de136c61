"""The checklist of a pause (docs/screens-and-pauses.md), as a function of its inputs.

Declarative checks always; on ``safety_level: medical_critical`` with the LLM layer enabled,
up to ``RPA_SAFETY_CHECKS_LLM_MAX_CHECKS`` contextual checks from the local model, which are
never required. A model that fails gives no check, an event, and (fail mode ``closed``)
one required ``system`` check so the person knows the screen was not looked at for them.
The only I/O is the injected :class:`~actors.safety_checks.llm.LlmClient`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from actors.safety_checks.llm import (
    LlmClient,
    LlmFailure,
    LlmQuery,
    LlmReply,
    answer_schema,
    build_prompt,
    parse_answer,
    select,
)
from messages import events
from messages.replay import SafetyCheck
from messages.safety_checks import BuildPausePayload, LlmAudit, PausePayload, ReplayContext
from messages.workflow import Action
from workflow.safety_rules import (
    LLM_UNAVAILABLE_CHECK_ID,
    llm_unavailable_check,
    pause_checks,
    pause_message,
    safety_level,
)

# Below this, a call could not even connect: report a timeout without sending anything.
MIN_CALL_S = 0.05


class SafetyChecksConfig(BaseSettings):
    """The origin spec's env vars, names and defaults kept (docs/operations.md); fail mode is
    ours."""

    model_config = SettingsConfigDict(env_prefix="RPA_SAFETY_CHECKS_", frozen=True,
                                      populate_by_name=True)

    llm_enabled: bool = True
    llm_model: str = Field("medgemma:4b", min_length=1)
    llm_timeout_s: float = Field(5.0, gt=0, le=600)
    llm_max_checks: int = Field(3, ge=0, le=20)
    llm_fail_mode: Literal["open", "closed"] = "open"
    ollama_url: str = Field("http://localhost:11434", min_length=1,
                            validation_alias=AliasChoices("OLLAMA_URL", "ollama_url"))


def wants_llm(action: Action, config: SafetyChecksConfig) -> bool:
    """Whether this pause calls the model (and so may block up to the timeout)."""
    return safety_level(action) == "medical_critical" and config.llm_enabled


def build_pause_payload(action: Action, context: ReplayContext, last_screenshot: bytes | None,
                        llm: LlmClient | None, config: SafetyChecksConfig,
                        budget_s: float | None = None) -> PausePayload:
    """The payload of a pause_for_human. ``budget_s``: time left for the model call, when
    the caller has already spent some of ``llm_timeout_s`` (queueing)."""
    declared = pause_checks(action)
    base = PausePayload(checks=declared, message=pause_message(action),
                        safety_level=safety_level(action))
    if base.safety_level != "medical_critical":
        return base
    if not config.llm_enabled or llm is None:
        return base.model_copy(update={"llm_status": "disabled"})
    prompt = build_prompt(action, context, declared, config.llm_max_checks)
    audit = LlmAudit(model=config.llm_model, url=llm.url, prompt=prompt,
                     image_sha256=(hashlib.sha256(last_screenshot).hexdigest()
                                   if last_screenshot else None))
    timeout_s = config.llm_timeout_s if budget_s is None else min(config.llm_timeout_s,
                                                                  budget_s)
    try:
        if not last_screenshot:
            # A vision model asked about a screen it cannot see would only make things up.
            raise LlmFailure("no_screenshot", "no screenshot of the workstation to look at")
        if timeout_s < MIN_CALL_S:
            raise LlmFailure("timeout", "no time left for the call after waiting in line")
        reply = _ask(llm, LlmQuery(model=config.llm_model, prompt=prompt,
                                   schema=answer_schema(), images=[last_screenshot],
                                   timeout_s=timeout_s))
        audit = audit.model_copy(update={"raw_answer": reply.raw,
                                         "latency_ms": round(reply.latency_ms, 1)})
        proposed = parse_answer(reply.raw)
    except LlmFailure as failure:
        return _failed(base, audit, failure, config)
    chosen = select(proposed, declared, config.llm_max_checks)
    taken = {c.id for c in declared}
    llm_checks: list[SafetyCheck] = []
    for check in chosen.kept:
        cid = _free_id(f"llm_{len(llm_checks) + 1}", taken)
        llm_checks.append(SafetyCheck(id=cid, label=check.label.strip(), required=False,
                                      source="llm_contextual",
                                      evidence=check.evidence.strip() or None))
    return base.model_copy(update={
        "checks": [*declared, *llm_checks], "llm_status": "ok",
        "llm": audit.model_copy(update={"dropped": chosen.dropped})})


def _ask(llm: LlmClient, query: LlmQuery) -> LlmReply:
    """The client's reply; whatever it raises is a failure of the call, not of the pause."""
    try:
        return llm.generate(query)
    except LlmFailure:
        raise
    except Exception as exc:
        raise LlmFailure("client_error", f"{type(exc).__name__}: {exc}"[:500]) from None


def _failed(base: PausePayload, audit: LlmAudit, failure: LlmFailure,
            config: SafetyChecksConfig) -> PausePayload:
    audit = audit.model_copy(update={
        "error": failure.cause, "error_detail": failure.detail,
        "raw_answer": audit.raw_answer if audit.raw_answer is not None else failure.raw,
        "latency_ms": round(audit.latency_ms or failure.latency_ms, 1)})
    checks = list(base.checks)
    if config.llm_fail_mode == "closed":
        checks.append(llm_unavailable_check(
            f"{failure.cause}: {failure.detail}",
            _free_id(LLM_UNAVAILABLE_CHECK_ID, {c.id for c in checks})))
    return base.model_copy(update={"checks": checks, "llm_status": "failed", "llm": audit})


def _free_id(wanted: str, taken: set[str]) -> str:
    """``wanted``, or ``wanted_2``, ... : never the id of another check of this pause."""
    cid, n = wanted, 1
    while cid in taken:
        n += 1
        cid = f"{wanted}_{n}"
    taken.add(cid)
    return cid


def events_for(request: BuildPausePayload, payload: PausePayload
               ) -> list[tuple[str, dict[str, Any]]]:
    """The bus events of one answered request (docs/operations.md, "Events")."""
    who = {"replay_id": request.replay_id, "session_id": request.session_id,
           "machine_id": request.machine_id, "action_id": request.action.action_id}
    out: list[tuple[str, dict[str, Any]]] = []
    llm = payload.llm
    if llm is not None and llm.error is not None:
        out.append((events.SAFETY_CHECKS_LLM_FAILED, {
            **who, "cause": llm.error, "detail": llm.error_detail, "model": llm.model,
            "url": llm.url, "latency_ms": llm.latency_ms,
            "fail_mode": "closed" if any(c.source == "system" for c in payload.checks)
            else "open"}))
    out.append((events.SAFETY_CHECKS_GENERATED, {
        **who, "count": len(payload.checks), "sources": [c.source for c in payload.checks],
        "required": sum(c.required for c in payload.checks),
        "safety_level": payload.safety_level, "llm_status": payload.llm_status}))
    return out
