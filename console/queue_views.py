"""What the console's queues page shows, from the dispatcher's ``queue.*`` answers (pure
functions; docs/queues.md, "At the console").

Two levels, as the command line has them: a queue's list of items (``queue show``) carries
no patient data, neither inputs nor the values read (outputs: only their names); an item
opened (``queue item``) carries its inputs, a ``sensitive`` one masked by the dispatcher,
its outputs and its history, and the console records that view before sending it
(console/view_log.py).
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, Field

from actors.dispatcher.machine.queue_rules import COMMAND_FROM
from console import labels
from messages.queue import QueueCommandName

ITEM_STATE: Final = {
    "new": "En attente",
    "in_progress": "En cours",
    "done": "Terminé",
    "business_failure": "Échec métier",
    "system_failure": "Échec technique, nouvel essai prévu",
    "needs_person": "Attend une personne",
    "cancelled": "Annulé",
    "skipped": "Traité hors de Léa",
    "failed": "Échec définitif",
}
AGENT_STATE: Final = {"idle": "libre", "busy": "occupé", "paused": "en pause",
                      "offline": "hors ligne"}


class QueueRow(BaseModel):
    """One queue: its items counted by state, its waiting line."""

    name: str
    pool: str
    workflow_id: str
    max_attempts: int
    counts: dict[str, int]
    total: int
    oldest_waiting_s: float
    at_risk: int
    inputs: list[str]
    """The declared inputs' names (the columns a file gives), a sensitive one marked."""
    sensitive: list[str]


class AgentRow(BaseModel):
    machine_id: str
    pool: str
    state: str
    state_label: str
    last_seen: float | None = None


class QueueList(BaseModel):
    queues: list[QueueRow]
    agents: list[AgentRow]


class Stated(BaseModel):
    """An item's state, as it is now or was at a point of its history."""

    state: str
    state_label: str
    reason: str | None = None
    reason_label: str | None = None
    machine_id: str | None = None
    replay_id: str | None = None


class ItemRow(Stated):
    """One item in a queue's list: no inputs, no values read (their names only)."""

    reference: str
    priority: str
    deadline: float | None = None
    not_before: float | None = None
    attempts: int
    at_risk: bool = False
    created_at: float
    updated_at: float
    output_names: list[str] = Field(default_factory=list)
    commands: list[QueueCommandName] = Field(default_factory=list)
    """The commands its state allows (the role decides who may send them)."""


class QueueItems(BaseModel):
    queue: QueueRow
    items: list[ItemRow]
    matching: int
    """Items of the queue in the states asked, of which ``items`` are the first."""


class HistoryEntry(Stated):
    at: float


class ItemDetail(ItemRow):
    """An item opened: its inputs (a sensitive one masked), outputs and history."""

    queue: str
    inputs: dict[str, str]
    outputs: dict[str, str]
    history: list[HistoryEntry]


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


BY_PERSON: Final = {"retry": "relancé par", "skip": "ignoré par", "cancel": "annulé par"}
"""A person's command, as the dispatcher gives it as the reason (``skip by NAME``)."""
REPLAY_END: Final = {"replay failed": "replay en échec", "replay cancelled": "replay arrêté"}


def reason_label(reason: str | None) -> str | None:
    """A pause reason in a few words; a person's command with that person's name."""
    if reason is None:
        return None
    command, by, person = reason.partition(" by ")
    if by and command in BY_PERSON:
        return f"{BY_PERSON[command]} {person}"
    return labels.REASON_SHORT.get(reason) or REPLAY_END.get(reason, reason)


def queue_row(q: dict[str, Any]) -> QueueRow:
    counts = {str(k): _int(v) for k, v in dict(q.get("counts") or {}).items()}
    declared = [i for i in q.get("inputs") or [] if isinstance(i, dict)]
    return QueueRow(
        name=str(q.get("name", "")), pool=str(q.get("pool", "")),
        workflow_id=str(q.get("workflow_id", "")), max_attempts=_int(q.get("max_attempts")),
        counts=counts, total=sum(counts.values()),
        oldest_waiting_s=_float(q.get("oldest_waiting_s")) or 0.0,
        at_risk=_int(q.get("at_risk")),
        inputs=[str(i.get("name")) for i in declared],
        sensitive=[str(i.get("name")) for i in declared if i.get("sensitive") is True])


def agent_row(a: dict[str, Any]) -> AgentRow:
    state = str(a.get("state", "unknown"))
    return AgentRow(machine_id=str(a.get("machine_id", "")), pool=str(a.get("pool", "")),
                    state=state, state_label=AGENT_STATE.get(state, state),
                    last_seen=_float(a.get("last_seen")))


def commands_for(state: str) -> list[QueueCommandName]:
    """The commands the dispatcher takes for an item in ``state`` (its own rule)."""
    return [c for c, states in COMMAND_FROM.items() if state in states]


def _stated(d: dict[str, Any]) -> dict[str, Any]:
    state = str(d.get("state", ""))
    reason = _text(d.get("reason"))
    return {"state": state, "state_label": ITEM_STATE.get(state, state), "reason": reason,
            "reason_label": reason_label(reason), "machine_id": _text(d.get("machine_id")),
            "replay_id": _text(d.get("replay_id"))}


def _row_fields(i: dict[str, Any]) -> dict[str, Any]:
    state = str(i.get("state", ""))
    outputs = i.get("outputs")
    return {
        **_stated(i), "reference": str(i.get("reference", "")),
        "priority": str(i.get("priority", "normal")),
        "deadline": _float(i.get("deadline")), "not_before": _float(i.get("not_before")),
        "attempts": _int(i.get("attempts")), "at_risk": i.get("at_risk") is True,
        "created_at": _float(i.get("created_at")) or 0.0,
        "updated_at": _float(i.get("updated_at")) or 0.0,
        "output_names": sorted(str(k) for k in outputs) if isinstance(outputs, dict) else [],
        "commands": commands_for(state)}


def item_row(i: dict[str, Any]) -> ItemRow:
    """An item for the list: what ``queue show`` prints, never its values."""
    return ItemRow(**_row_fields(i))


def history_entry(h: dict[str, Any]) -> HistoryEntry:
    return HistoryEntry(at=_float(h.get("at")) or 0.0, **_stated(h))


ADDED: Final = "added"
"""The history's first line: when the item was added (its ``created_at``)."""


def item_detail(i: dict[str, Any]) -> ItemDetail:
    """An item opened (the dispatcher masked its sensitive inputs and outputs); its history
    starts when it was added."""
    inputs, outputs = i.get("inputs"), i.get("outputs")
    added = HistoryEntry(at=_float(i.get("created_at")) or 0.0, state=ADDED,
                         state_label="Ajouté à la file")
    return ItemDetail(
        **_row_fields(i), queue=str(i.get("queue", "")),
        inputs={str(k): str(v) for k, v in inputs.items()} if isinstance(inputs, dict) else {},
        outputs={str(k): str(v) for k, v in outputs.items()}
        if isinstance(outputs, dict) else {},
        history=[added, *(history_entry(h) for h in i.get("history") or []
                          if isinstance(h, dict))])
