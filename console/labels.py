"""The words a clinician reads: French labels for statuses, pause reasons, loop signals, and
one short line per bus event or audit record.

Bus topics and audit kinds mostly share their names (``lea:replay_paused`` / ``replay_paused``),
so :func:`happening` takes either. Pure functions of their inputs.
"""

from __future__ import annotations

from typing import Any, Final

STATUS: Final = {
    "running": "En cours",
    "paused_need_help": "En attente de validation",
    "completed": "Terminé",
    "failed": "Échec",
    "cancelled": "Arrêté",
}

# Why a replay paused: one sentence that says what happened and what is expected.
REASON: Final = {
    "user_request": "La procédure demande une vérification humaine avant de continuer.",
    "loop_detected": ("Léa semble tourner en rond : ses dernières actions ne font plus "
                      "avancer l'écran."),
    "system_dialog": "Une fenêtre du système bloque l'écran du poste.",
    "wrong_window": "La fenêtre attendue n'est pas à l'écran du poste.",
    "needs_human": "Léa demande de l'aide sur le poste.",
    "target_not_found": "L'élément à utiliser n'a pas été trouvé à l'écran, même après "
                        "plusieurs essais.",
    "ambiguous_target": ("L'élément à utiliser apparaît plusieurs fois à l'écran : Léa ne "
                         "sait pas lequel choisir."),
    "action_failed": "Une étape échoue à plusieurs reprises.",
    "orphan_max_resends": "Le poste n'a pas répondu pour une étape.",
    "guard_lost": "Le poste n'a pas répondu à une vérification de l'écran.",
    "failed_after_input": ("Une étape a agi sur l'écran puis a échoué : Léa ne la refera "
                           "pas."),
    "input_unknown": ("Léa ne sait pas si une étape a agi sur l'écran : elle ne la refera "
                      "pas."),
    "dead_client": "Léa ne répond plus sur ce poste.",
    "operator": "Mis en pause par un opérateur.",
    "identity_mismatch": ("L'identifiant du patient attendu n'a pas été lu à l'écran : ce "
                          "n'est peut-être pas le bon dossier."),
    "output_invalid": ("Une valeur à lire à l'écran n'a pas été lue, ou ne correspond pas à "
                       "ce qui est attendu."),
    "output_missing": ("Une étape utilise une valeur que Léa n'a pas lue à l'écran dans ce "
                       "replay."),
}

# The same, in a few words (the list's "last event" column).
REASON_SHORT: Final = {
    "user_request": "vérification humaine demandée",
    "loop_detected": "Léa semble tourner en rond",
    "system_dialog": "une fenêtre système bloque l'écran",
    "wrong_window": "mauvaise fenêtre à l'écran",
    "needs_human": "Léa demande de l'aide",
    "target_not_found": "élément introuvable à l'écran",
    "ambiguous_target": "élément présent plusieurs fois",
    "action_failed": "une étape échoue",
    "orphan_max_resends": "le poste ne répond pas",
    "guard_lost": "vérification de l'écran sans réponse",
    "failed_after_input": "échec après une action",
    "input_unknown": "action peut-être faite",
    "dead_client": "Léa ne répond plus",
    "operator": "demandée par un opérateur",
    "identity_mismatch": "patient à vérifier",
    "output_invalid": "valeur illisible à l'écran",
    "output_missing": "valeur jamais lue",
}

SIGNAL: Final = {
    "action_repeat": "La même action répétée sans effet",
    "screen_static": "L'écran ne change plus",
    "retry_threshold": "Trop de nouvelles tentatives sur une étape",
}

EVIDENCE: Final = {
    "count": "Actions identiques à la suite",
    "action": "Action répétée",
    "screen_changed": "L'écran a changé",
    "captures": "Captures identiques à la suite",
    "ignored_tiles": "Zones ignorées (horloge, curseur…)",
    "embedder": "Méthode de comparaison",
    "min_cosine": "Ressemblance minimale entre captures",
    "action_id": "Étape",
    "retries": "Nouvelles tentatives",
    "threshold": "Seuil",
    "error": "Dernière erreur",
}
_EVIDENCE_VALUES: Final = {"no": "non", "yes": "oui", "unknown": "inconnu"}

SOURCE: Final = {"declarative": "Procédure", "llm_contextual": "Léa", "system": "Système"}

PROGRESS_STATE: Final = {
    "awaiting_human_correction": "correction humaine attendue sur le poste",
    "awaiting_route": "choix de l'écran",
    "awaiting_loop": "vérification anti-boucle",
    "awaiting_payload": "préparation des vérifications",
}


def status(name: str) -> str:
    return STATUS.get(name, name)


def reason(name: str | None) -> str:
    if not name:
        return "Raison inconnue."
    return REASON.get(name, f"Raison : {name}.")


def signal(name: str | None) -> str:
    return SIGNAL.get(name or "", name or "")


def evidence_value(value: Any) -> str:
    if isinstance(value, bool):
        return "oui" if value else "non"
    if isinstance(value, str):
        return _EVIDENCE_VALUES.get(value, value)
    return str(value)


def steps(done: int, total: int) -> str:
    return f"{done} / {total} étape" + ("s" if total > 1 else "")


def happening(name: str, data: dict[str, Any]) -> str:
    """One line for a bus event (``lea:...``) or an audit record kind, from its data."""
    kind = name.removeprefix("lea:")
    step = data.get("action_id") or ""
    report = data.get("report") if isinstance(data.get("report"), dict) else None
    who = data.get("operator") or "un opérateur inconnu"
    match kind:
        case "replay_started":
            return f"Démarré ({data.get('total', '?')} étapes)"
        case "action_dispatched":
            return f"Étape {step} envoyée au poste"
        case "action_resent" | "dispatch_orphan_resent":
            return f"Étape {step} renvoyée (le poste n'avait pas répondu)"
        case "action_acked":
            if data.get("outcome") == "skipped":
                return f"Étape {step} sautée"
            if data.get("success"):
                return f"Étape {step} faite"
            return f"Étape {step} en échec : {data.get('error') or 'erreur inconnue'}"
        case "report_received" if report is not None:
            step = report.get("action_id") or step
            state = data.get("status")
            if state not in ("accepted", None):
                return f"Compte rendu de l'étape {step} ignoré ({state})"
            if report.get("success"):
                return f"Étape {step} faite{found_by(report)}"
            return (f"Étape {step} en échec : {report.get('error') or 'erreur inconnue'}"
                    f"{found_by(report)}")
        case "action_progress":
            state = str(data.get("state") or data.get("progress") or "")
            return f"Étape {step} : {PROGRESS_STATE.get(state, state or 'en cours')}"
        case "replay_paused":
            why = data.get("reason")
            return f"En pause : {REASON_SHORT.get(str(why), str(why))}"
        case "replay_resumed":
            acked = data.get("acknowledged_check_ids") or []
            checked = f" ({len(acked)} vérification(s) cochée(s))" if acked else ""
            return f"Repris par {who}{checked}"
        case "replay_cancelled":
            ended = " (échec)" if data.get("outcome") == "failed" else ""
            return f"Arrêté par {who}{ended}"
        case "replay_completed":
            return f"Terminé ({data.get('completed_actions', '?')} / {data.get('total', '?')})"
        case "loop_detected":
            return f"Boucle détectée : {signal(data.get('signal'))}"
        case "safety_checks_generated":
            return f"Liste de vérifications prête ({data.get('count', 0)})"
        case "safety_checks_llm_failed":
            return f"Léa n'a pas pu proposer de vérifications ({data.get('cause')})"
        case "dispatch_orphan_giveup" | "action_given_up":
            return f"Étape {step} abandonnée (le poste ne répond pas)"
        case "dead_client_signal":
            return "Le poste ne répond plus"
        case "retry_scheduled":
            return f"Nouvel essai prévu pour l'étape {step}"
        case "action_skipped":
            return f"Étape {step} sautée"
        case "output_read":
            return f"Valeur « {data.get('output')} » lue à l'écran : {data.get('value')}"
        case "report_refused":
            return f"Compte rendu refusé pour l'étape {step} (mauvais poste)"
    return kind.replace("_", " ").capitalize() + (f" — {step}" if step else "")


# Bus topics too frequent or too technical to stand as a replay's "last event".
QUIET_TOPICS: Final = frozenset({
    "lea:monitor_routed", "lea:peer_connected", "lea:peer_disconnected", "lea:consult_missed",
    "lea:loop_check_missed", "lea:bad_message",
})


def found_by(report: dict[str, Any]) -> str:
    """How the agent found its target (method, score, the box it read), or ``""``."""
    method = report.get("resolution_method")
    if not isinstance(method, str):
        return ""
    score = report.get("resolution_score")
    said = method + (f" {score:.2f}" if isinstance(score, int | float) else "")
    box = report.get("resolution_box")
    if isinstance(box, dict) and all(isinstance(box.get(k), int | float) for k in "xywh"):
        said += f", zone ({box['x']:g},{box['y']:g} {box['w']:g}x{box['h']:g})"
    return f" (cible : {said})"
