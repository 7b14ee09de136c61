"""Pure business rules: action id suffixes, how a report is judged, pause texts, checks.

Pause messages are in French: they are shown to the supervisor on the workstation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from messages.dispatch import ActionReport, InputPerformed
from messages.loop import LOOP_DETECTED
from messages.replay import SafetyCheck
from messages.workflow import INPUT_TYPES, Action
from workflow.identity import IDENTITY_MISMATCH
from workflow.outputs import OUTPUT_INVALID, OUTPUT_MISSING
from workflow.safety_rules import pause_message

_SUFFIX = re.compile(r"_(?:retry\d+|resume\d*)$")

# Pause reasons (ReplaySummary.pause_reason).
USER_REQUEST = "user_request"
SYSTEM_DIALOG = "system_dialog"
WRONG_WINDOW = "wrong_window"
NEEDS_HUMAN = "needs_human"
TARGET_NOT_FOUND = "target_not_found"
AMBIGUOUS_TARGET = "ambiguous_target"
ACTION_FAILED = "action_failed"
ORPHAN_MAX_RESENDS = "orphan_max_resends"
DEAD_CLIENT = "dead_client"
OPERATOR = "operator"
FAILED_AFTER_INPUT = "failed_after_input"
INPUT_UNKNOWN = "input_unknown"
GUARD_LOST = "guard_lost"
INPUT_REASONS = frozenset({FAILED_AFTER_INPUT, INPUT_UNKNOWN})
"""Pauses at a step whose input went out or may have: resuming goes on past it unless the
person says ``redo`` (ResumeReplay.step)."""
FAILURE_REASONS = frozenset({SYSTEM_DIALOG, WRONG_WINDOW, NEEDS_HUMAN, TARGET_NOT_FOUND,
                             ACTION_FAILED, ORPHAN_MAX_RESENDS, DEAD_CLIENT, LOOP_DETECTED,
                             FAILED_AFTER_INPUT, INPUT_UNKNOWN, GUARD_LOST,
                             IDENTITY_MISMATCH, OUTPUT_INVALID, OUTPUT_MISSING})
"""Pauses something went wrong for: a replay cancelled at one of them ends ``failed``."""


# Room left in an action id (128 chars max) for the suffixes the dispatcher adds.
MAX_STEP_ID = 128 - len("_resume999")


def workflow_problems(actions: list[Action]) -> list[str]:
    """Step ids the dispatcher could not derive unique retry/resume ids from."""
    problems = []
    for a in actions:
        if _SUFFIX.search(a.action_id):
            problems.append(f"{a.action_id}: ends with a reserved _retryN/_resumeN suffix")
        elif len(a.action_id) > MAX_STEP_ID:
            problems.append(f"{a.action_id[:20]}...: longer than {MAX_STEP_ID} characters")
    return problems


def base_id(action_id: str) -> str:
    """The workflow step id behind ``action_id``: one ``_retry{N}``/``_resume{N}`` removed."""
    return _SUFFIX.sub("", action_id)


def retry_id(action_id: str, n: int) -> str:
    """``{base}_retry{n}``: the suffix replaces any previous one, never stacks."""
    return f"{base_id(action_id)}_retry{n}"


def resume_id(action_id: str, n: int) -> str:
    """``{base}_resume`` for the first resume of a step, ``{base}_resume{n}`` after.

    Numbered after the first so that every dispatched id stays unique within a replay: the
    agent's ledger dedupes on (replay_id, action_id) and would not run a second ``_resume``.
    """
    return f"{base_id(action_id)}_resume" + (str(n) if n > 1 else "")


@dataclass(frozen=True, slots=True)
class PauseCause:
    reason: str
    message: str
    detail: dict[str, Any]


def _label(action: Action) -> str:
    if action.intention:
        return action.intention
    spec = action.target_spec
    if spec and (spec.by_text or spec.vlm_description):
        return spec.by_text or spec.vlm_description or action.action_id
    return action.action_id


def report_pause(report: ActionReport, action: Action) -> PauseCause | None:
    """The pause a report asks for by itself (system dialog, wrong window, ambiguous
    target, needs_human)."""
    error = report.error or ""
    if error == AMBIGUOUS_TARGET:
        # Two places read alike and nothing told them apart: the same screen would give the
        # same answer to a retry; only a person can say which one (docs/grounding.md).
        return PauseCause(AMBIGUOUS_TARGET,
                          f"Léa voit plusieurs « {_label(action)} » à l'écran et ne sait pas "
                          "lequel utiliser. Faites l'action vous-même ou laissez un seul "
                          "choix visible, puis reprenez.",
                          {"target_description": report.target_description})
    if error.startswith("system_dialog"):
        dialog = report.system_dialog or {}
        category = str(dialog.get("category") or error.partition(":")[2] or "inconnue")
        why = f" : {dialog['reason']}" if dialog.get("reason") else ""
        return PauseCause(SYSTEM_DIALOG,
                          f"Une fenêtre système bloque Léa ({category}){why}. "
                          "Traitez-la, puis reprenez.",
                          {"error": error, "system_dialog": dialog})
    if report.warning == "wrong_window":
        expected = action.expected_window_before or action.expected_window_title
        hint = f" (attendue : « {expected} »)" if expected else ""
        return PauseCause(WRONG_WINDOW,
                          f"Léa n'est pas sur la bonne fenêtre{hint} pour « {_label(action)} ». "
                          "Affichez la bonne fenêtre, puis reprenez.", {"expected": expected})
    if error == IDENTITY_MISMATCH:
        # The screen may show another patient's record: nothing more is typed into it until
        # a person looked (docs/screens-and-pauses.md, "The patient's identity").
        expected = str(action.parameters.get("expect_text") or "")
        read = report.target_description or "rien de lisible"
        return PauseCause(IDENTITY_MISMATCH,
                          f"Léa attendait « {expected} » à l'écran et a lu : {read}. Ce n'est "
                          "peut-être pas le bon patient : vérifiez le dossier affiché avant "
                          "de reprendre.",
                          {"expected": expected, "read": report.target_description})
    if error == OUTPUT_INVALID:
        # Nothing is typed from a value read wrong (docs/protocol.md, "Outputs").
        name = str(action.parameters.get("output") or "")
        read = report.target_description or "rien de lisible"
        return PauseCause(OUTPUT_INVALID,
                          f"Léa devait lire « {name} » à l'écran pour « {_label(action)} » et "
                          f"n'a pas lu de valeur valable ({read}). Vérifiez l'écran, puis "
                          "reprenez : Léa relira.",
                          {"output": name, "read": report.target_description})
    if report.needs_human:
        if error == "indeterminate_after_restart":
            text = (f"Léa a redémarré pendant « {_label(action)} » : vérifiez si l'action a été "
                    "faite avant de reprendre.")
        else:
            cause = f" ({error})" if error else ""
            text = f"Léa a besoin d'aide{cause} pour « {_label(action)} ». Vérifiez l'écran."
        return PauseCause(NEEDS_HUMAN, text, {"error": report.error})
    return None


def input_state(report: ActionReport, action: Action) -> InputPerformed:
    """Whether a report's input went out; an agent that does not say (older than the field)
    is taken at its worst for an input action."""
    if report.input_performed is not None:
        return report.input_performed
    return "unknown" if action.type in INPUT_TYPES else "none"


def input_pause(report: ActionReport, action: Action) -> PauseCause:
    """A failed step whose input went out, or may have: never redone automatically (the
    input would happen twice). The person checks the screen; resuming goes on with the next
    step, unless they say it was not done (``redo``, docs/architecture.md)."""
    state = input_state(report, action)
    label, error = _label(action), report.error or "erreur"
    if report.error == "indeterminate_after_restart":
        head = f"Léa a redémarré pendant « {label} » et ne sait pas si l'action a été faite."
    elif state == "performed":
        head = f"L'action « {label} » a été faite, puis elle a échoué ({error})."
    else:
        head = f"Léa ne sait pas si l'action « {label} » a été faite ({error})."
    return PauseCause(
        FAILED_AFTER_INPUT if state == "performed" else INPUT_UNKNOWN,
        f"{head} Vérifiez l'écran : Léa ne la refera pas d'elle-même. Si elle a été "
        "faite, reprenez : Léa continuera à l'étape suivante ; sinon, faites-la vous-même "
        "ou demandez à Léa de la refaire.",
        {"error": report.error, "input_performed": state,
         "target_description": report.target_description})


def retries_exhausted(report: ActionReport, action: Action, retries: int) -> PauseCause:
    """The pause once a failing step has used its retry budget."""
    if report.error == "target_not_found":
        what = report.target_description or _label(action)
        return PauseCause(TARGET_NOT_FOUND, f"Je n'y arrive pas (« {what} »)",
                          {"target_description": report.target_description,
                           "retries": retries})
    return PauseCause(ACTION_FAILED,
                      f"L'action « {_label(action)} » échoue ({report.error or 'erreur'}) "
                      f"après {retries} nouvelles tentatives.",
                      {"error": report.error, "retries": retries})


def giveup_pauses(action: Action) -> bool:
    """Whether giving up on ``action`` pauses the replay: always, but for a ``wait`` (it
    has no effect and guards nothing). An input may have run; after a guard
    (``verify_screen``) that never answered, nothing may run until a person looked."""
    return action.type != "wait"


def orphan_pause(action: Action) -> PauseCause:
    if action.type in ("verify_screen", "read_text"):
        return PauseCause(GUARD_LOST,
                          f"Léa n'a pas pu vérifier l'écran pour « {_label(action)} » (le "
                          "poste n'a pas répondu). Vérifiez vous-même l'écran avant de "
                          "reprendre.", {"action_type": action.type})
    return PauseCause(ORPHAN_MAX_RESENDS,
                      f"Léa n'a pas répondu pour « {_label(action)} », vérifiez l'écran "
                      "(l'action a peut-être été faite) avant de reprendre.",
                      {"action_type": action.type})


def output_missing_pause(action: Action, names: list[str]) -> PauseCause:
    """A step uses outputs this run has not read (a person said their read_text step was
    done): it is not performed with an empty value."""
    listed = ", ".join(f"« {n} »" for n in names)
    return PauseCause(OUTPUT_MISSING,
                      f"« {_label(action)} » utilise {listed}, que Léa n'a pas lu à l'écran "
                      "dans ce replay. Léa ne peut pas continuer : annulez ce replay et "
                      "relancez-le.", {"outputs": names})


def dead_client_pause(machine_id: str, count: int, period_s: float) -> PauseCause:
    return PauseCause(DEAD_CLIENT,
                      f"Léa ne répond plus sur le poste {machine_id} ({count} actions sans "
                      f"réponse en {period_s:g} s). Vérifiez le poste, puis reprenez.",
                      {"dead_count": count, "period_s": period_s})


def operator_pause_message(operator: str | None, message: str | None) -> str:
    """The text shown for an operator pause: theirs, or who paused."""
    if message:
        return message
    who = f" par {operator}" if operator else ""
    return f"Replay mis en pause{who}. L'action en cours se termine ; reprenez pour continuer."


def human_pause(action: Action, checks: list[SafetyCheck]) -> PauseCause:
    return PauseCause(USER_REQUEST, pause_message(action),
                      {"safety_level": action.parameters.get("safety_level"),
                       "checks": len(checks)})
