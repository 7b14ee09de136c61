"""Work items from files as hospital offices save them, and exports a spreadsheet cannot run
(workflow/queue_files.py, docs/queues.md "Files")."""

from __future__ import annotations

import csv
import io
import time

from messages.inputs import InputSpec
from workflow.queue_files import export, neutralise, parse

DECLARED = [InputSpec(name="ipp", pattern=r"\d{6}"),
            InputSpec(name="note", required=False),
            InputSpec(name="nir", required=False, sensitive=True, pattern=r"\d{13}")]


def test_a_french_excel_file_windows_1252_semicolons_quoted_line_breaks() -> None:
    text = ('reference;ipp;note;priority;deadline;not_before\r\n'
            'adm-1;004217;"Allergie :\npénicilline";haute;31/12/2099;01/01/2026 08:30\r\n'
            'adm-2;004218;;;;\r\n\r\n')
    parsed = parse(text.encode("cp1252"), DECLARED, "admissions.csv")
    assert parsed.ok, (parsed.problems, parsed.rows)
    first, second = parsed.items
    assert first.reference == "adm-1" and first.inputs["note"] == "Allergie :\npénicilline"
    assert first.priority == "high" and second.priority == "normal"
    assert first.deadline is not None and time.localtime(first.deadline).tm_hour == 23
    assert first.not_before == time.mktime((2026, 1, 1, 8, 30, 0, 0, 0, -1))
    assert second.inputs == {"ipp": "004218"} and second.deadline is None


def test_utf8_with_a_bom_and_commas() -> None:
    data = "\ufeffreference,ipp\nadm-é,004217\n".encode()
    parsed = parse(data, DECLARED)
    assert parsed.ok and parsed.items[0].reference == "adm-é"


def test_json_lines() -> None:
    data = b'{"reference": "a", "inputs": {"ipp": "004217"}, "priority": "low"}\n' \
           b'{"reference": "b", "ipp": "004218", "deadline": "2099-01-01T10:00"}\n'
    parsed = parse(data, DECLARED, "items.jsonl")
    assert parsed.ok and [i.priority for i in parsed.items] == ["low", "normal"]
    assert parsed.items[1].deadline is not None


def test_every_bad_row_is_reported_and_no_item_is_kept() -> None:
    text = ("reference;ipp;nir;priority;deadline\n"
            "a;004217;;;\n"
            "a;004218;;;\n"  # the same reference twice
            "b;4217;;;\n"  # against its pattern
            "c;004219;123;;\n"  # a sensitive value against its pattern: not shown
            "d;004220;;urgent;\n"
            "e;004221;;;demain\n"
            ";004222;;;\n"
            "f;004223;;\n")  # a cell short
    parsed = parse(text.encode(), DECLARED)
    assert not parsed.ok
    by_row = {r["row"]: " / ".join(r["problems"]) for r in parsed.rows}
    assert "already on row 1" in by_row[2]
    assert "pattern" in by_row[3] and "'4217'" in by_row[3]
    assert "nir" in by_row[4] and "123" not in by_row[4]
    assert "priority 'urgent'" in by_row[5]
    assert "deadline 'demain'" in by_row[6]
    assert "reference: empty" in by_row[7]
    assert "cells" in by_row[8]
    assert sorted(by_row) == [2, 3, 4, 5, 6, 7, 8]
    assert parsed.rows[0]["line"] == 3  # where it starts in the file


def test_missing_and_unknown_columns_refuse_the_file() -> None:
    parsed = parse(b"reference;note;colour\nadm-1;x;red\n", DECLARED)
    assert parsed.items == [] and parsed.rows == []
    assert "column 'colour': not an item field nor a declared input" in parsed.problems
    assert "column 'ipp': missing (a required input)" in parsed.problems
    assert parse(b"ipp\n004217\n", DECLARED).problems == ["column 'reference': missing"]


def test_empty_files() -> None:
    assert parse(b"", DECLARED).problems == ["the file is empty"]
    assert parse(b"\xef\xbb\xbf\r\n", DECLARED).problems == ["the file is empty"]
    assert parse(b"reference;ipp\r\n", DECLARED).problems == [
        "no item in the file (a header alone)"]


def test_a_hundred_thousand_rows_and_one_more() -> None:
    rows = "".join(f"r{i};{i:06d}\n" for i in range(100_000))
    parsed = parse(("reference;ipp\n" + rows).encode(), DECLARED)
    assert parsed.ok and len(parsed.items) == 100_000
    over = parse(("reference;ipp\n" + rows + "x;000001\n").encode(), DECLARED)
    assert not over.ok and "more than 100000 rows" in over.problems[0]


def test_an_export_never_runs_as_a_formula() -> None:
    for cell in ("=1+1", "+33 6", "-2", "@SUM(A1)", "\tx", "\rx"):
        assert neutralise(cell) == "'" + cell
    assert neutralise("adm-1") == "adm-1"
    item = {"reference": "=HYPERLINK(\"http://x\")", "state": "done", "reason": None,
            "priority": "normal", "deadline": None, "attempts": 1, "machine_id": "w1",
            "replay_id": "r", "created_at": 0.0, "updated_at": 0.0,
            "inputs": {"ipp": "004217", "note": "@cmd"}, "outputs": {"lit": "-12"}}
    data = export([item], DECLARED)
    assert data.startswith(b"\xef\xbb\xbf")
    rows = list(csv.reader(io.StringIO(data[3:].decode()), delimiter=";"))
    assert rows[0][-1] == "output:lit"
    assert rows[1][0].startswith("'=") and "'@cmd" in rows[1] and rows[1][-1] == "'-12"
