"""How an audit record reads: one timeline line for people, one JSON object for tools.

The data of a record is whatever its sender decided; the fields a reviewer looks for first
(which step and attempt, the outcome, who decided, which checks) are pulled out in a fixed
order, from ``data`` or from a report nested in it, and the rest follows as ``key=value``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from messages.audit import AuditRecordOut

# Ids every record of a replay carries: the header says them once.
_QUIET = {"replay_id", "session_id", "at"}
_SHOWN = ("action_id", "attempt_id", "action_type", "status", "success", "error", "warning",
          "operator", "reason", "message", "acknowledged_check_ids", "safety_checks",
          "monitor_resolution", "resent_count", "resend_reason")


def utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def record_json(record: AuditRecordOut) -> dict[str, Any]:
    """The export form: every stored field (what the chain hashes) plus the image states."""
    return record.model_dump(mode="json")


def _get(data: dict[str, Any], name: str) -> Any:
    if name in data:
        return data[name]
    report = data.get("report")
    return report.get(name) if isinstance(report, dict) else None


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _checks(value: Any) -> str:
    if not isinstance(value, list):
        return _short(value)
    parts = []
    for check in value:
        if isinstance(check, dict):
            mark = "" if check.get("required", True) else "?"
            parts.append(f"{check.get('id')}{mark}({check.get('source', '-')})")
        else:
            parts.append(str(check))
    return ", ".join(parts)


def _field(name: str, value: Any) -> str | None:
    if value is None or value == [] or value == {}:
        return None
    match name:
        case "attempt_id":
            return f"attempt {str(value)[:8]}"
        case "success":
            return "ok" if value is True else "FAILED"
        case "safety_checks":
            return f"checks: {_checks(value)}"
        case "acknowledged_check_ids":
            return f"acknowledged: {_checks(value)}"
        case "monitor_resolution" if isinstance(value, dict):
            return f"monitor {value.get('idx')} ({value.get('source')})"
        case "action_id":
            return str(value)
        case "message":
            return f"message={_short(value, 80)!r}"
    return f"{name}={_short(value)}"


def describe_record(record: AuditRecordOut) -> str:
    """``time  #seq  kind  details``; screenshots with their hash, pruned ones marked."""
    data = record.data
    parts = [p for name in _SHOWN if (p := _field(name, _get(data, name))) is not None]
    for key, value in data.items():
        if key not in _QUIET and key not in _SHOWN and key != "report" and value is not None:
            parts.append(f"{key}={_short(value, 40)}")
    for name, digest in record.screenshots.items():
        state = record.screenshot_state.get(name, "stored")
        parts.append(f"{name}={digest[:12]}" + ("" if state == "stored" else f" ({state})"))
    source = "" if record.source == "dispatcher" else f" [{record.source}]"
    return (f"{utc(record.at)}  #{record.seq:<6} {record.kind:<20}{source} "
            + "  ".join(parts)).rstrip()
