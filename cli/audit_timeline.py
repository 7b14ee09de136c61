"""How an audit record reads: a few timeline lines for people, one JSON object for tools.

The data of a record is whatever its sender decided; the fields a reviewer looks for first
(which step and attempt, the outcome, who decided, which checks) are pulled out in a fixed
order, from ``data`` or from a report nested in it, and the rest follows as ``key=value``
(nested objects flattened: ``detail.retries=3``). A record that carries more than fits on a
line — a pause's full message, each check with its label and evidence, the model's prompt
and raw answer — gets indented lines under its first one. ``--json`` has every field whole.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from messages.audit import AuditRecordOut

# Ids every record of a replay carries: the header (or replay_started) says them once.
_QUIET = {"replay_id", "session_id", "at", "machine_id"}
_SHOWN = ("action_id", "attempt_id", "action_type", "status", "success", "error", "warning",
          "operator", "account", "role", "os_user", "reason", "message",
          "acknowledged_check_ids", "safety_checks", "monitor_resolution", "resent_count",
          "resend_reason")
_SEEN_ELSEWHERE = {"report", "detail"}  # _report_parts, _detail_lines
_INDENT = " " * 10
MESSAGE_WIDTH = 80
PROMPT_WIDTH = 240
"""The model's prompt is long and mostly fixed text: its start here, whole in ``--json``."""
ANSWER_WIDTH = 1000


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


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {} or value == ""


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
    if _empty(value):
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
        case "message" if isinstance(value, str) and len(value) > MESSAGE_WIDTH:
            return None  # whole on a line of its own
        case "message":
            return f"message={value!r}"
        case "resent_count":
            return None if value == 0 else f"resent #{value}"
    return f"{name}={_short(value)}"


def _flat(key: str, value: Any, width: int = 40) -> list[str]:
    """``key=value``, an object as ``key.sub=value`` each, a list of plain values joined."""
    if _empty(value):
        return []
    if isinstance(value, dict):
        return [p for sub, item in value.items() for p in _flat(f"{key}.{sub}", item, width)]
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [f"{key}={_short(','.join(map(str, value)), width)}"]
    return [f"{key}={_short(value, width)}"]


def _report_parts(data: dict[str, Any]) -> list[str]:
    """What a report says beyond its outcome: how the target was found, who sent it."""
    report = data.get("report")
    if not isinstance(report, dict):
        return []
    parts = []
    if report.get("resolution_method"):
        score = report.get("resolution_score")
        parts.append(f"found by {report['resolution_method']}"
                     + (f" {score:.2f}" if isinstance(score, int | float) else ""))
    position = report.get("actual_position")
    if isinstance(position, dict) and "x_pct" in position:
        parts.append(f"at ({position['x_pct']}, {position.get('y_pct')})")
    box = report.get("resolution_box")
    if isinstance(box, dict) and all(isinstance(box.get(k), int | float) for k in "xywh"):
        parts.append(f"box ({box['x']:g},{box['y']:g} {box['w']:g}x{box['h']:g})")
    for key in ("needs_human", "target_description", "system_dialog", "correction"):
        if not _empty(report.get(key)) and report.get(key) is not False:
            parts += _flat(key, report[key])
    sender = data.get("sender_machine")
    if sender is not None and sender != report.get("machine_id"):
        parts.append(f"SENT BY {sender} (report says {report.get('machine_id')})")
    return parts


def _detail_lines(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A pause's ``detail``: (parts for the first line, lines of their own for the model)."""
    detail = data.get("detail")
    if not isinstance(detail, dict):
        return _flat("detail", detail), []
    # Said already: the reason (again in a loop verdict), the number of checks (listed).
    said = {key for key, value in detail.items() if data.get(key) == value}
    if isinstance(detail.get("checks"), int) and isinstance(data.get("safety_checks"), list):
        said.add("checks")
    parts = [p for key, value in detail.items() if key != "llm" and key not in said
             for p in _flat(key, value)]
    llm = detail.get("llm")
    if not isinstance(llm, dict):
        return parts, []
    took = llm.get("latency_ms")
    lines = [" ".join(p for p in (
        f"model {llm.get('model')}", f"({llm.get('url')})" if llm.get("url") else "",
        f"{took:.0f} ms" if isinstance(took, int | float) else "",
        f"screen {str(llm['image_sha256'])[:12]}" if llm.get("image_sha256") else "",
        f"error={llm['error']}" if llm.get("error") else "",
        _short(llm["error_detail"], 120) if llm.get("error_detail") else "") if p)]
    prompt = llm.get("prompt")
    if isinstance(prompt, str):
        lines.append(f"prompt ({len(prompt)} chars): {_short(prompt, PROMPT_WIDTH)}")
    if llm.get("raw_answer") is not None:
        lines.append(f"answer: {_short(llm['raw_answer'], ANSWER_WIDTH)}")
    if not _empty(llm.get("dropped")):
        lines.append(f"dropped: {_short(llm['dropped'], ANSWER_WIDTH)}")
    return parts, lines


def _check_lines(value: Any) -> list[str]:
    """One line per check: id, required or not, who asked for it, label, evidence."""
    if not isinstance(value, list):
        return []
    lines = []
    for check in value:
        if not isinstance(check, dict):
            continue
        need = "REQUIRED" if check.get("required", True) else "optional"
        line = f"check {check.get('id')} {need} [{check.get('source', '-')}]"
        if check.get("label"):
            line += f" {check['label']}"
        if check.get("evidence"):
            line += f" — evidence: {check['evidence']}"
        lines.append(line)
    return lines


def describe_record(record: AuditRecordOut) -> str:
    """``time  #seq  kind  details``, then indented lines for what does not fit on it."""
    data = record.data
    parts = [p for name in _SHOWN if (p := _field(name, _get(data, name))) is not None]
    if record.kind == "replay_started" and data.get("machine_id"):
        parts.insert(0, f"machine {data['machine_id']}")
    parts += _report_parts(data)
    detail_parts, more = _detail_lines(data)
    parts += detail_parts
    said = _QUIET | _SEEN_ELSEWHERE | set(_SHOWN)
    if isinstance(data.get("report"), dict):
        said.add("sender_machine")  # _report_parts says it when it is not the report's
    for key, value in data.items():
        if key not in said:
            parts += _flat(key, value)
    for name in sorted(record.screenshots, key=lambda n: (n != "before", n)):
        state = record.screenshot_state.get(name, "stored")
        parts.append(f"{name}={record.screenshots[name][:12]}"
                     + ("" if state == "stored" else f" ({state})"))
    source = "" if record.source == "dispatcher" else f" [{record.source}]"
    message = data.get("message")
    lines = [f"message: {message}"] if isinstance(message, str) and len(
        message) > MESSAGE_WIDTH else []
    lines += _check_lines(data.get("safety_checks")) + more
    head = (f"{utc(record.at)}  #{record.seq:<6} {record.kind:<20}{source} "
            + "  ".join(parts)).rstrip()
    return "\n".join([head, *(_INDENT + line for line in lines)])
