"""What the console's pages and API show, built from what the actors answer (pure functions).

- A replay's row comes from the dispatcher's :class:`ReplaySummary` (authoritative) plus the
  last bus event seen for it.
- Its pause: reason, message and checklist from the summary; what the summary does not carry
  (the loop detector's signal and evidence, the screenshot at the pause) from the audit
  trail: the ``replay_paused`` record of the current pause, and the latest screenshot
  recorded up to it. The trail is written after the decision, so it may lag a moment:
  ``detail_pending`` then says "ask again shortly".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from console import labels
from messages.audit import AuditRecordOut
from messages.replay import ReplaySummary, SafetyCheck

ACTIVE = ("running", "paused_need_help")
PAUSED = "paused_need_help"
# Records after which a replay is no longer in the pause a replay_paused record opened.
_PAUSE_ENDS = frozenset({"replay_resumed", "replay_cancelled", "replay_completed"})
_SHOT_ORDER = ("after", "before")


class LastEvent(BaseModel):
    topic: str
    text: str
    at: float


class ReplayRow(BaseModel):
    """One line of the replay list."""

    replay_id: str
    session_id: str
    machine_id: str
    workflow_id: str
    workflow_label: str
    """What people read: the workflow's name, its id when it has none."""
    mode: str
    status: str
    status_label: str
    completed_actions: int
    total: int
    progress_label: str
    current_step: str | None = None
    step_label: str | None = None
    """What people read: the step's intention, its id when the workflow gives none."""
    current_step_state: str | None = None
    pause_reason: str | None = None
    pause_reason_label: str | None = None
    last_event: LastEvent | None = None
    created_at: float
    updated_at: float
    outputs: dict[str, str] = Field(default_factory=dict)
    """What the run's read_text steps read (docs/protocol.md, "Outputs"), masked if
    sensitive."""


class CheckView(BaseModel):
    id: str
    label: str
    required: bool
    source: str
    source_label: str
    evidence: str | None = None


class EvidenceItem(BaseModel):
    key: str
    label: str
    value: str


class LoopView(BaseModel):
    signal: str
    signal_label: str
    evidence: list[EvidenceItem] = Field(default_factory=list)


class ShotView(BaseModel):
    sha256: str
    name: str
    state: str
    url: str


class PauseView(BaseModel):
    """Everything the pause dialog shows."""

    reason: str | None
    reason_label: str
    message: str
    action_id: str | None = None
    intention: str | None = None
    """The step the pause is about and what it is for (the workflow's intention)."""
    paused_at: float | None = None
    checks: list[CheckView] = Field(default_factory=list)
    required_ids: list[str] = Field(default_factory=list)
    loop: LoopView | None = None
    screenshot: ShotView | None = None
    detail_pending: bool = False
    """The audit trail has not caught up with this pause yet: ask again in a moment."""


class ReplayDetail(BaseModel):
    replay: ReplayRow
    pause: PauseView | None = None


class TimelineEntry(BaseModel):
    seq: int
    at: float
    kind: str
    source: str
    text: str
    action_id: str | None = None
    operator: str | None = None
    acknowledged_check_ids: list[str] = Field(default_factory=list)
    screenshots: list[ShotView] = Field(default_factory=list)


class Timeline(BaseModel):
    replay_id: str
    entries: list[TimelineEntry]
    last_seq: int
    """Pass as ``after_seq`` to get only what came since."""


def row(summary: ReplaySummary, last: LastEvent | None = None,
        last_step: str | None = None) -> ReplayRow:
    active = summary.status in ACTIVE
    step = summary.current_action_id or (last_step if active else None)
    state = summary.current_action_state
    intention = summary.current_intention if active else None
    return ReplayRow(
        replay_id=summary.replay_id, session_id=summary.session_id,
        machine_id=summary.machine_id, workflow_id=summary.workflow_id,
        workflow_label=summary.workflow_name or summary.workflow_id, mode=summary.mode,
        status=summary.status, status_label=labels.status(summary.status),
        completed_actions=summary.completed_actions, total=summary.total,
        progress_label=labels.steps(summary.completed_actions, summary.total),
        current_step=step, step_label=intention or step,
        current_step_state=labels.PROGRESS_STATE.get(state, state) if state else None,
        pause_reason=summary.pause_reason,
        pause_reason_label=labels.reason(summary.pause_reason) if summary.pause_reason else None,
        last_event=last, created_at=summary.created_at, updated_at=summary.updated_at,
        outputs=dict(summary.outputs))


def check_view(check: SafetyCheck) -> CheckView:
    return CheckView(id=check.id, label=check.label, required=check.required,
                     source=check.source, source_label=labels.SOURCE.get(check.source,
                                                                          check.source),
                     evidence=check.evidence)


def shot_views(record: AuditRecordOut) -> list[ShotView]:
    names = sorted(record.screenshots, key=lambda n: (
        _SHOT_ORDER.index(n) if n in _SHOT_ORDER else len(_SHOT_ORDER), n))
    return [ShotView(sha256=record.screenshots[n], name=n,
                     state=record.screenshot_state.get(n, "stored"),
                     url=f"/api/screenshots/{record.screenshots[n]}") for n in names]


def current_pause_record(records: Sequence[AuditRecordOut]) -> AuditRecordOut | None:
    """The ``replay_paused`` record of the pause still open at the end of ``records``."""
    for record in reversed(records):
        if record.kind in _PAUSE_ENDS:
            return None
        if record.kind == "replay_paused":
            return record
    return None


def shot_at(records: Sequence[AuditRecordOut], up_to_seq: int | None) -> ShotView | None:
    """The latest stored screenshot recorded at or before ``up_to_seq`` (``after`` first)."""
    for record in reversed(records):
        if up_to_seq is not None and record.seq > up_to_seq:
            continue
        stored = [s for s in shot_views(record) if s.state == "stored"]
        if stored:
            return stored[0]
    return None


def loop_view(detail: dict[str, Any]) -> LoopView | None:
    signal = detail.get("signal")
    if not isinstance(signal, str) or not signal:
        return None
    raw = detail.get("evidence")
    evidence = raw if isinstance(raw, dict) else {}
    known = list(labels.EVIDENCE)  # the trail sorts keys: show them in a reading order
    keys = sorted(evidence, key=lambda k: (known.index(k) if k in known else len(known), k))
    return LoopView(signal=signal, signal_label=labels.signal(signal), evidence=[
        EvidenceItem(key=str(k), label=labels.EVIDENCE.get(str(k), str(k)),
                     value=labels.evidence_value(evidence[k])) for k in keys])


def pause_view(summary: ReplaySummary, records: Sequence[AuditRecordOut]) -> PauseView | None:
    """The dialog of ``summary``'s pause (None when it is not paused)."""
    if summary.status != PAUSED:
        return None
    record = current_pause_record(records)
    # The record must be of this pause (a resume and a new pause may both still be on their
    # way to the trail): the same reason and message.
    if record is not None and (record.data.get("reason") != summary.pause_reason
                               or record.data.get("message") != summary.pause_message):
        record = None
    detail = record.data.get("detail") if record is not None else None
    checks = [check_view(c) for c in summary.safety_checks]
    return PauseView(
        reason=summary.pause_reason, reason_label=labels.reason(summary.pause_reason),
        message=summary.pause_message or labels.reason(summary.pause_reason),
        action_id=summary.pause_action_id or (
            _str(record.data.get("action_id")) if record is not None else None),
        intention=summary.pause_intention,
        paused_at=record.at if record is not None else None,
        checks=checks, required_ids=[c.id for c in checks if c.required],
        loop=loop_view(detail) if isinstance(detail, dict) else None,
        screenshot=shot_at(records, record.seq if record is not None else None),
        detail_pending=record is None)


def timeline_entry(record: AuditRecordOut) -> TimelineEntry:
    data = record.data
    nested = data.get("report")
    report: dict[str, Any] = nested if isinstance(nested, dict) else {}
    acked = data.get("acknowledged_check_ids")
    return TimelineEntry(
        seq=record.seq, at=record.at, kind=record.kind, source=record.source,
        text=labels.happening(record.kind, data),
        action_id=_str(data.get("action_id")) or _str(report.get("action_id")),
        operator=_str(data.get("operator")),
        acknowledged_check_ids=[str(i) for i in acked] if isinstance(acked, list) else [],
        screenshots=shot_views(record))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
