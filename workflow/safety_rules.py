"""The safety rules of a pause_for_human: the message shown, the declared checks, and the
system checks added when a step is critical or the model did not look; and the confirming
pause in front of any other step marked critical (docs/screens-and-pauses.md)."""

from __future__ import annotations

from typing import Any

from messages.replay import SafetyCheck
from messages.workflow import Action, SafetyLevel, Workflow

DEFAULT_PAUSE_MESSAGE = "Pause demandée par le workflow."

LLM_UNAVAILABLE_CHECK_ID = "llm_unavailable"


def llm_unavailable_check(evidence: str | None = None,
                          check_id: str = LLM_UNAVAILABLE_CHECK_ID) -> SafetyCheck:
    """The required ``system`` check of fail mode ``closed``: the model did not look."""
    return SafetyCheck(
        id=check_id, label=(
            "Les vérifications contextuelles n'ont pas pu être produites : vérifiez vous-même "
            "l'écran et le dossier avant de continuer."),
        required=True, source="system", evidence=evidence)


def pause_message(action: Action) -> str:
    """The text shown at a pause_for_human: its ``message``, else its intention."""
    message = action.parameters.get("message")
    if isinstance(message, str) and message.strip():
        return message
    return action.intention or DEFAULT_PAUSE_MESSAGE


def safety_level(action: Action) -> SafetyLevel | None:
    level = action.parameters.get("safety_level")
    return level if level in ("standard", "medical_critical") else None


CONFIRM_STEP_CHECK_ID = "confirm_step"


def confirm_step_check(check_id: str = CONFIRM_STEP_CHECK_ID) -> SafetyCheck:
    """The required ``system`` check of a ``medical_critical`` pause that declares no
    required check: a step marked critical always waits for a person who confirms it."""
    return SafetyCheck(
        id=check_id, label=("Confirmez cette étape : elle est marquée critique pour le "
                            "patient (medical_critical)."),
        required=True, source="system", evidence=None)


def pause_checks(action: Action) -> list[SafetyCheck]:
    """The checks a pause_for_human shows before any from the model: the declared ones,
    and, at ``medical_critical`` with none of them required, :func:`confirm_step_check`
    (so such a pause always pauses, in every mode, and needs a named person to resume)."""
    checks = declared_checks(action)
    if safety_level(action) == "medical_critical" and not any(c.required for c in checks):
        taken = {c.id for c in checks}
        cid, n = CONFIRM_STEP_CHECK_ID, 1
        while cid in taken:
            n += 1
            cid = f"{CONFIRM_STEP_CHECK_ID}_{n}"
        checks.append(confirm_step_check(cid))
    return checks


def declared_checks(action: Action) -> list[SafetyCheck]:
    """``parameters.safety_checks`` as SafetyCheck (source declarative, evidence None).

    A Workflow only admits the spec's shape (messages.workflow.PauseSafety); a lone Action
    is taken leniently but never loses a check: a bare string becomes a label, a missing
    id becomes ``check_<n>``, a repeated id gets ``_<n>``, a non-boolean ``required`` is
    True. Same rules as the dispatcher's (actors/dispatcher/machine/rules.py), on purpose.
    """
    raw = action.parameters.get("safety_checks")
    if not isinstance(raw, list):
        return []
    checks: list[SafetyCheck] = []
    seen: set[str] = set()
    for i, item in enumerate(raw, start=1):
        entry: dict[str, Any] = item if isinstance(item, dict) else {"label": str(item)}
        cid = str(entry.get("id") or f"check_{i}")
        while cid in seen:
            cid = f"{cid}_{i}"
        seen.add(cid)
        label = str(entry.get("label") or entry.get("id") or f"Vérification {i}")
        required = entry.get("required", True)
        checks.append(SafetyCheck(id=cid, label=label,
                                  required=required if isinstance(required, bool) else True,
                                  source="declarative", evidence=None))
    return checks


CONFIRM_SUFFIX = ".confirm"


def needs_confirmation(action: Action) -> bool:
    """A step other than a pause_for_human that is marked ``medical_critical`` or declares
    checks: a person confirms it before Léa does it (:func:`with_confirmations`)."""
    return action.type != "pause_for_human" and (
        safety_level(action) == "medical_critical"
        or bool(action.parameters.get("safety_checks")))


def confirmation(action: Action) -> Action:
    """The pause_for_human put in front of ``action``: its safety fields, on its monitor."""
    label = action.intention or action.action_id
    p = action.parameters
    parameters: dict[str, Any] = {
        "message": f"Étape critique : « {label} ». Vérifiez avant que Léa ne la fasse."}
    for name in ("safety_level", "safety_checks"):
        if name in p:
            parameters[name] = p[name]
    return Action(action_id=action.action_id + CONFIRM_SUFFIX, type="pause_for_human",
                  parameters=parameters, intention=f"Confirmer : {label}",
                  monitor_index=action.monitor_index, monitor_geometry=action.monitor_geometry)


def with_confirmations(workflow: Workflow) -> Workflow:
    """``workflow`` with a confirming pause in front of each step that needs one
    (docs/screens-and-pauses.md): ``safety_level`` and ``safety_checks`` are honoured on any
    step, never ignored. Raises ValueError if a generated id is taken."""
    if not any(needs_confirmation(a) for a in workflow.actions):
        return workflow
    actions = [b for a in workflow.actions
               for b in ((confirmation(a), a) if needs_confirmation(a) else (a,))]
    return Workflow.model_validate({
        **workflow.model_dump(mode="json", exclude={"actions"}),
        "actions": [a.model_dump(mode="json") for a in actions]})
