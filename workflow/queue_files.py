"""Work items from a file, and a queue's items to a spreadsheet (docs/queues.md, "Files").

Reading: a CSV file as French offices save it (``;`` or ``,`` separator, found from the
header; UTF-8, UTF-8 with a BOM, or Windows-1252; quoted fields with line breaks) or JSON
lines. Every row is checked (its columns, its reference unique in the file, its values
against the workflow's declared inputs) and every refused row is reported; the caller adds
the file all or nothing.

Writing: a CSV that a spreadsheet opens as text: a cell that starts with ``=``, ``+``,
``-``, ``@``, a tab or a carriage return is prefixed with ``'`` (OWASP's advice against
formula injection), UTF-8 with a BOM and ``;`` so that a French Excel reads it as saved.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any

from pydantic import ValidationError

from messages.inputs import InputSpec
from messages.queue import MAX_ITEMS_PER_ADD, Priority, QueueItemIn
from workflow.inputs import value_problems

FIELDS = ("reference", "priority", "deadline", "not_before")
"""Columns of an item beside the workflow's inputs; only ``reference`` is required."""
PRIORITIES: dict[str, Priority] = {
    "": "normal",
    "high": "high",
    "normal": "normal",
    "low": "low",
    "haute": "high",
    "normale": "normal",
    "basse": "low",
}
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_BOM = b"\xef\xbb\xbf"


@dataclass
class Parsed:
    """The items of a file, or why it is refused: ``problems`` for the whole file, ``rows``
    for each refused row (``row``: its number among the data rows, ``line``: where it
    starts in the file)."""

    items: list[QueueItemIn] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.rows


def decode(data: bytes) -> str:
    """UTF-8 (with or without a BOM), else Windows-1252: what Excel saves."""
    if data.startswith(_BOM):
        return data[len(_BOM) :].decode("utf-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def parse(data: bytes, declared: list[InputSpec], name: str = "") -> Parsed:
    """The items of a CSV file or, when ``name`` ends with ``.jsonl`` / ``.ndjson`` or the
    text starts with ``{``, of JSON lines."""
    text = decode(data)
    if not text.strip():
        return Parsed(problems=["the file is empty"])
    if name.lower().endswith((".jsonl", ".ndjson")) or text.lstrip().startswith("{"):
        return _check(_json_rows(text), declared)
    return _csv(text, declared)


def _csv(text: str, declared: list[InputSpec]) -> Parsed:
    first = text.splitlines()[0]
    sep = max(";,\t", key=first.count)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as exc:
        return Parsed(problems=[f"header: {exc}"])
    problems = _header_problems(header, declared)
    if problems:
        return Parsed(problems=problems)

    def rows() -> Iterable[tuple[int, dict[str, str] | str]]:
        line = reader.line_num + 1
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield line, f"unreadable: {exc}"
                return
            start, line = line, reader.line_num + 1
            if not any(c.strip() for c in cells):
                continue  # a blank line, as spreadsheets leave at the end
            if len(cells) != len(header):
                yield start, f"{len(cells)} cells, the header has {len(header)}"
                continue
            yield start, dict(zip(header, cells, strict=True))

    return _check(rows(), declared)


def _header_problems(header: list[str], declared: list[InputSpec]) -> list[str]:
    known = {*FIELDS, *(i.name for i in declared)}
    problems = [
        f"column {h!r}: not an item field nor a declared input" for h in header if h not in known
    ]
    problems += [f"column {h!r}: twice" for h in sorted({h for h in header if header.count(h) > 1})]
    if "reference" not in header:
        problems.append("column 'reference': missing")
    problems += [
        f"column {i.name!r}: missing (a required input)"
        for i in declared
        if i.required and i.name not in header
    ]
    return problems


def _json_rows(text: str) -> Iterable[tuple[int, dict[str, str] | str]]:
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            yield n, f"not JSON: {exc.msg}"
            continue
        if not isinstance(obj, dict):
            yield n, "not a JSON object"
            continue
        inputs = obj.pop("inputs", {})
        if not isinstance(inputs, dict):
            yield n, "'inputs' is not an object"
            continue
        flat = {**{k: v for k, v in obj.items()}, **inputs}
        yield n, {str(k): "" if v is None else str(v) for k, v in flat.items()}


def _check(rows: Iterable[tuple[int, dict[str, str] | str]], declared: list[InputSpec]) -> Parsed:
    out = Parsed()
    names = {i.name for i in declared}
    seen: dict[str, int] = {}
    for row, (line, cells) in enumerate(rows, start=1):
        if row > MAX_ITEMS_PER_ADD:
            out.problems.append(f"more than {MAX_ITEMS_PER_ADD} rows: split the file")
            return out
        if isinstance(cells, str):
            out.rows.append({"row": row, "line": line, "reference": None, "problems": [cells]})
            continue
        reference = cells.get("reference", "").strip()
        problems = [
            f"column {k!r}: not an item field nor a declared input"
            for k in cells
            if k not in names and k not in FIELDS
        ]
        if not reference:
            problems.append("reference: empty")
        elif reference in seen:
            problems.append(f"reference {reference!r}: already on row {seen[reference]}")
        else:
            seen[reference] = row
        values = {k: v for k, v in cells.items() if k in names and v != ""}
        problems += value_problems(declared, values)
        priority = PRIORITIES.get(cells.get("priority", "").strip().lower())
        if priority is None:
            problems.append(f"priority {cells['priority']!r}: high, normal or low")
        deadline = _when(
            cells.get("deadline", ""), end_of_day=True, problems=problems, column="deadline"
        )
        not_before = _when(
            cells.get("not_before", ""), end_of_day=False, problems=problems, column="not_before"
        )
        if not problems:
            try:
                out.items.append(
                    QueueItemIn(
                        reference=reference,
                        inputs=values,
                        priority=priority or "normal",
                        deadline=deadline,
                        not_before=not_before,
                    )
                )
            except ValidationError as exc:
                problems += [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        if problems:
            out.rows.append(
                {"row": row, "line": line, "reference": reference or None, "problems": problems}
            )
    if not out.items and not out.rows and not out.problems:
        out.problems.append("no item in the file (a header alone)")
    return out


def _when(text: str, *, end_of_day: bool, problems: list[str], column: str) -> float | None:
    """``JJ/MM/AAAA [HH:MM]`` (local time, as French offices write it), ISO 8601, or epoch
    seconds; a date alone is the end of that day for a deadline, its start otherwise."""
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    for fmt in ("%d/%m/%Y %H:%M", "%d/%m/%Y %H:%M:%S", "%d/%m/%Y"):
        try:
            parsed = datetime.strptime(text, fmt)
        except ValueError:
            continue
        if fmt == "%d/%m/%Y" and end_of_day:
            parsed = datetime.combine(parsed.date(), time(23, 59, 59))
        return parsed.timestamp()
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        problems.append(f"{column} {text!r}: not a date (JJ/MM/AAAA [HH:MM] or ISO 8601)")
        return None


def neutralise(cell: str) -> str:
    """A cell a spreadsheet shows as text, never runs as a formula."""
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def export(items: list[dict[str, Any]], declared: list[InputSpec]) -> bytes:
    """Items (as the dispatcher shows them) as CSV for a spreadsheet."""
    inputs = [i.name for i in declared]
    outputs = sorted({k for item in items for k in item.get("outputs", {})})
    head = [
        "reference",
        "state",
        "reason",
        "priority",
        "deadline",
        "attempts",
        "machine_id",
        "replay_id",
        "created_at",
        "updated_at",
        *inputs,
        *(f"output:{o}" for o in outputs),
    ]
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, delimiter=";", lineterminator="\r\n")
    writer.writerow(head)
    for item in items:
        row = [
            item["reference"],
            item["state"],
            item.get("reason") or "",
            item["priority"],
            _iso(item.get("deadline")),
            str(item["attempts"]),
            item.get("machine_id") or "",
            item.get("replay_id") or "",
            _iso(item["created_at"]),
            _iso(item["updated_at"]),
            *(item["inputs"].get(n, "") for n in inputs),
            *(item.get("outputs", {}).get(o, "") for o in outputs),
        ]
        writer.writerow([neutralise(str(c)) for c in row])
    return _BOM + buf.getvalue().encode("utf-8")


def _iso(when: float | None) -> str:
    return "" if when is None else datetime.fromtimestamp(when).isoformat(timespec="seconds")
