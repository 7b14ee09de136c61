"""What the safety_checks actor asks the local model, and how its answer is judged (pure).

The model gets a prompt and a screenshot, and must answer JSON that fits
:class:`ContextualAnswer`; the same model's JSON Schema is sent as Ollama's ``format`` so
the model is constrained to it, and the answer is validated against it again here.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from messages.replay import SafetyCheck
from messages.safety_checks import DroppedCheck, LlmCause, ReplayContext
from messages.workflow import Action
from workflow.safety_rules import pause_message


# No docstrings on these two: pydantic would put them in the schema the model reads; the
# field descriptions (in French, like the prompt) are meant for it.
class ContextualCheck(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(min_length=1, max_length=300,
                       description="Consigne courte pour la personne qui supervise.")
    evidence: str = Field(max_length=1000,
                          description="Ce qui, à l'écran, justifie cette vérification.")


class ContextualAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    additional_checks: list[ContextualCheck] = Field(
        description="Vérifications supplémentaires (liste vide si rien ne les justifie).")


def answer_schema() -> dict[str, Any]:
    """The JSON Schema sent as Ollama's ``format`` (structured output)."""
    return ContextualAnswer.model_json_schema()


@dataclass(frozen=True, slots=True)
class LlmQuery:
    model: str
    prompt: str
    schema: dict[str, Any]
    images: list[bytes]
    timeout_s: float  # a hard deadline for the whole call, not a per-read timeout


@dataclass(frozen=True, slots=True)
class LlmReply:
    raw: str  # the model's text (Ollama's ``response``)
    latency_ms: float


class LlmFailure(Exception):
    """The call gave no usable text; ``cause`` is one of messages.safety_checks.LlmCause."""

    def __init__(self, cause: LlmCause, detail: str, latency_ms: float = 0.0,
                 raw: str | None = None) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause: LlmCause = cause
        self.detail = detail
        self.latency_ms = latency_ms
        self.raw = raw


class LlmClient(Protocol):
    """A local model server; ``generate`` returns within ``query.timeout_s`` or raises."""

    @property
    def url(self) -> str: ...

    def generate(self, query: LlmQuery) -> LlmReply: ...


def build_prompt(action: Action, context: ReplayContext, declared: list[SafetyCheck],
                 max_checks: int) -> str:
    """The prompt (docs/screens-and-pauses.md, "Safety checks at a pause"): the screen, the
    workflow's message, the checks already asked.

    In French, like everything the supervisor reads; the checks' labels come back to them.
    """
    already = "\n".join(f"- {c.label}" for c in declared) or "- (aucune)"
    recent = "\n".join(
        f"- {s.action_id} ({s.type})" + (f" : {s.intention}" if s.intention else "")
        for s in context.recent_steps) or "- (aucune)"
    workflow = context.workflow_id + (f" « {context.workflow_name} »"
                                      if context.workflow_name else "")
    return (
        "Tu es Léa, une assistante qui rejoue un workflow hospitalier sous la supervision "
        "d'une personne.\n"
        "Le workflow s'arrête avant une étape médicalement critique : la personne doit "
        "valider une liste de vérifications avant de continuer.\n"
        f"Regarde la capture d'écran jointe et propose de 0 à {max_checks} vérifications "
        "supplémentaires, seulement si quelque chose de visible à l'écran le justifie "
        "(patient, date, dose, unité, champ vide ou incohérent...).\n\n"
        f"Workflow : {workflow}, étape {context.index + 1} sur {context.total}.\n"
        f"Message de la pause : {pause_message(action)}\n"
        f"Étapes précédentes :\n{recent}\n"
        f"Vérifications déjà demandées (ne les répète pas) :\n{already}\n\n"
        "Pour chaque vérification : « label » est une consigne courte pour la personne, "
        "« evidence » dit ce que tu as vu à l'écran qui la justifie.\n"
        'Si rien ne le justifie, réponds {"additional_checks": []}.\n'
        "Réponds uniquement en JSON."
    )


def parse_answer(raw: str) -> list[ContextualCheck]:
    """The checks of a raw answer; LlmFailure invalid_json / schema_violation otherwise."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise LlmFailure("invalid_json", f"the model's answer is not JSON: {exc}",
                         raw=raw) from None
    try:
        return ContextualAnswer.model_validate(data).additional_checks
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(answer)'}: {e['msg']}"
                          for e in exc.errors()[:3])
        raise LlmFailure("schema_violation", where, raw=raw) from None


def normalised(label: str) -> str:
    """A label compared loosely: case, accents, punctuation and spacing do not count."""
    text = unicodedata.normalize("NFKD", label.casefold())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return re.sub(r"[\W_]+", " ", text).strip()


@dataclass(slots=True)
class Selection:
    kept: list[ContextualCheck] = field(default_factory=list)
    dropped: list[DroppedCheck] = field(default_factory=list)


def select(proposed: list[ContextualCheck], declared: list[SafetyCheck],
           max_checks: int) -> Selection:
    """The model's checks that add something, at most ``max_checks``, in its order."""
    seen_declared = {normalised(c.label) for c in declared}
    seen_llm: set[str] = set()
    out = Selection()
    for check in proposed:
        key = normalised(check.label)
        why = ("blank" if not key else "repeats_declared" if key in seen_declared
               else "repeats_llm" if key in seen_llm
               else "over_max" if len(out.kept) >= max_checks else None)
        if why is not None:
            out.dropped.append(DroppedCheck(label=check.label, why=why))
            continue
        seen_llm.add(key)
        out.kept.append(check)
    return out
