"""Effects: what a decision of the core asks the shell to do, as plain (serialisable) data.

The shell commits the new state and the effects in one transaction (the outbox), then
performs them; after a crash it performs the pending ones again, so every receiver must
dedupe (the agent by action_id, the watchdog by attempt_id, the audit log by outbox id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actors.dispatcher.machine.queue_book import QueueDef, QueueItem
from actors.dispatcher.machine.state import ReplayState
from messages.base import Message
from messages.codec import decode, encode
from messages.dispatch import ActionReport, DispatchAction, InFlight


@dataclass(frozen=True, slots=True)
class SendToAgent:
    """Request ``agent.<machine_id>`` to execute an action (a first dispatch or a resend)."""

    machine_id: str
    message: DispatchAction


@dataclass(frozen=True, slots=True)
class TrackInFlight:
    """Tell the watchdog to time this attempt."""

    entry: InFlight


@dataclass(frozen=True, slots=True)
class UntrackInFlight:
    """Tell the watchdog this attempt is no longer waited for."""

    action_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True)
class PublishEvent:
    """A bus event; ``data["at"]`` is the time of the decision."""

    topic: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One decision worth an audit-trail entry; ``data["at"]`` is the time of the decision."""

    kind: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Consult:
    """Ask ``service`` and give its answer (or None on timeout) to ``core.consulted``.

    Not in the outbox: a replay left waiting by a crash is asked again at the start.
    """

    service: str
    replay_id: str
    token: str
    message: Message
    timeout_s: float


@dataclass(frozen=True, slots=True)
class Notify:
    """Tell ``service`` something whose loss costs nothing but a little memory or a window."""

    service: str
    message: Message


@dataclass(frozen=True, slots=True)
class RecordReport:
    """Local effect, consumed by the store in the same transaction (reports log, no outbox)."""

    report: ActionReport
    status: str  # accepted | duplicate | stale | unknown | refused
    sender_machine: str
    at: float
    dumped: dict[str, Any] | None = None
    """``report.model_dump(mode="python")``, when the decision made it already (its audit
    record holds it): the store does not make it again. Read only."""


Effect = (SendToAgent | TrackInFlight | UntrackInFlight | PublishEvent | AuditRecord
          | RecordReport | Consult | Notify)


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one input: the reply, the effects to perform, the replays to write.

    ``writes`` are the core's own objects, not copies: the shell stages them before the
    next input (the store writes their state as it is then). ``durable``: the core's word on
    whether the decision must be on disk before its reply and effects leave (the shell
    stages it in the turn's transaction, docs/durability.md); False, nothing to keep: the
    reply goes at once.
    """

    reply: Message
    effects: list[Effect] = field(default_factory=list)
    writes: tuple[ReplayState, ...] = ()
    durable: bool = False
    items: tuple[QueueItem, ...] = ()  # work items changed (queue_book.py)
    new_items: tuple[QueueItem, ...] = ()  # work items added
    new_queues: tuple[QueueDef, ...] = ()

    @property
    def changed(self) -> set[str]:
        """The ids of the replays it changed."""
        return {r.replay_id for r in self.writes}


# Serialisation (msgpack-friendly dicts) ----------------------------------------------------

def effect_to_dict(effect: Effect) -> dict[str, Any]:
    """A dict msgpack can pack; :func:`effect_from_dict` is its inverse."""
    match effect:
        case SendToAgent(machine_id, message):
            return {"kind": "send_to_agent", "machine_id": machine_id,
                    "message": message.model_dump(mode="json")}
        case TrackInFlight(entry):
            return {"kind": "track", "entry": entry.model_dump(mode="json")}
        case UntrackInFlight(action_id, attempt_id):
            return {"kind": "untrack", "action_id": action_id, "attempt_id": attempt_id}
        case PublishEvent(topic, data):
            return {"kind": "event", "topic": topic, "data": data}
        case Consult(service, replay_id, token, message, timeout_s):
            return {"kind": "consult", "service": service, "replay_id": replay_id,
                    "token": token, "message": encode(message, token), "timeout_s": timeout_s}
        case Notify(service, message):
            return {"kind": "notify", "service": service, "message": encode(message)}
        case AuditRecord(kind, data):
            return {"kind": "audit", "audit_kind": kind, "data": data}
        case RecordReport(report, status, sender, at):
            return {"kind": "record_report", "report": report.model_dump(mode="python"),
                    "status": status, "sender_machine": sender, "at": at}
    raise TypeError(f"not an effect: {effect!r}")


def effect_from_dict(d: dict[str, Any]) -> Effect:
    """Rebuild an effect from :func:`effect_to_dict`; raises ValueError on anything else."""
    kind = d.get("kind")
    if kind == "send_to_agent":
        return SendToAgent(d["machine_id"], DispatchAction.model_validate(d["message"]))
    if kind == "track":
        return TrackInFlight(InFlight.model_validate(d["entry"]))
    if kind == "untrack":
        return UntrackInFlight(d["action_id"], d["attempt_id"])
    if kind == "event":
        return PublishEvent(d["topic"], dict(d["data"]))
    if kind == "consult":
        return Consult(d["service"], d["replay_id"], d["token"], decode(d["message"]).body,
                       d["timeout_s"])
    if kind == "notify":
        return Notify(d["service"], decode(d["message"]).body)
    if kind == "audit":
        return AuditRecord(d["audit_kind"], dict(d["data"]))
    if kind == "record_report":
        return RecordReport(ActionReport.model_validate(d["report"]), d["status"],
                            d["sender_machine"], d["at"])
    raise ValueError(f"unknown effect kind {kind!r}")
