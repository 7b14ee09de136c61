"""``python run.py audit ...`` as a person runs it: verify names the first bad record of a
tampered trail (offline, no tree needed); show / export / prune go through a running
audit_log actor; an export verifies on its own; pruning keeps the chain valid."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.audit_log.store.audit_store import AuditStore, audit_paths
from messages.audit import AppendRecords, AuditRecordIn, RecordsAcked
from tests.audit_helpers import alter_byte, delete, insert_forged, store_records
from tests.conftest import ROOT, Spawn
from tests.integration.test_audit_log import AuditTree


def audit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "run.py", "audit", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def rec(i: int, replay: str = "rp1", kind: str = "action_dispatched",
        images: dict[str, bytes] | None = None, **data: object) -> AuditRecordIn:
    return AuditRecordIn(record_id=f"{replay}:{i}", source="dispatcher", kind=kind,
                         replay_id=replay, at=1_767_225_600.0 + i,
                         data={"action_id": f"s{i}", "n": i, **data},
                         screenshots=images or {})


@pytest.fixture
def trail(lea_env: dict[str, str]) -> Path:
    """A data dir with 30 records written by the store (as the actor would)."""
    data_dir = Path(lea_env["LEA_DATA_DIR"])
    store = AuditStore(data_dir)
    store_records(store, [rec(i, images={"after": b"img%d" % i} if i % 4 == 0 else None)
                          for i in range(30)], now=1_767_225_700.0)
    store.close()
    return data_dir


def test_verify_passes_on_an_intact_trail(trail: Path, lea_env: dict[str, str]) -> None:
    result = audit(lea_env, "verify")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "audit trail intact" in result.stdout and "30 records (seq 1..30)" in result.stdout
    head = next(line.split()[1] for line in result.stdout.splitlines()
                if line.startswith("head "))
    assert audit(lea_env, "verify", "--anchor", head).returncode == 0


@pytest.mark.parametrize(("tamper", "named"), [
    (lambda db: alter_byte(db, 11), "seq 11 (record_id rp1:10): altered"),
    (lambda db: delete(db, 17), "seq 18 (record_id rp1:17): removed: seq 17 missing"),
    (lambda db: insert_forged(db, 8), "seq 9 (record_id forged): inserted"),
    (lambda db: delete(db, 30), "seq 30: removed"),  # cut off the end: the anchor file
])
def test_verify_fails_and_names_the_first_bad_record(
        trail: Path, lea_env: dict[str, str], tamper: Callable[[Path], None],
        named: str) -> None:
    tamper(audit_paths(trail)[0])
    result = audit(lea_env, "verify")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "audit trail BROKEN" in result.stdout and named in result.stdout, result.stdout


def test_verify_names_a_changed_or_vanished_screenshot(trail: Path,
                                                       lea_env: dict[str, str]) -> None:
    shots = sorted(p for p in audit_paths(trail)[1].rglob("*") if p.is_file())
    shots[0].write_bytes(b"not the original")
    shots[1].unlink()
    result = audit(lea_env, "verify")
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if "screenshot problem" in line]
    assert len(problems) == 2 and any("missing and not pruned" in p for p in problems)
    assert any("changed" in p for p in problems)
    assert audit(lea_env, "verify", "--no-images").returncode == 1  # the missing one


def test_verify_without_a_database_says_so(lea_env: dict[str, str]) -> None:
    result = audit(lea_env, "verify")
    assert result.returncode == 2 and "no audit database" in result.stderr


def test_show_export_and_prune_through_the_actor(spawn: Spawn, lea_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    tree = AuditTree(spawn, lea_env)
    tree.wait_serving()
    records = [
        rec(0, kind="replay_started", operator="alice"),
        rec(1, attempt_id="ab" * 16, action_type="click"),
        rec(2, kind="action_reported", images={"before": b"b-img", "after": b"a-img"},
            report={"success": False, "error": "target_not_found", "attempt_id": "ab" * 16}),
        rec(3, kind="replay_paused", reason="needs_human",
            safety_checks=[{"id": "patient_id", "source": "declarative", "required": True}]),
        rec(4, kind="replay_resumed", operator="bob", acknowledged_check_ids=["patient_id"]),
        rec(0, replay="other"),
    ]
    assert isinstance(tree.call(AppendRecords(records=records)), RecordsAcked)

    shown = audit(lea_env, "show", "rp1")
    assert shown.returncode == 0, shown.stderr
    # Between the header and the count; indented lines belong to the record above them.
    timeline = [line for line in shown.stdout.splitlines()[1:-1] if not line.startswith(" ")]
    assert [line.split()[3] for line in timeline] == [r.kind for r in records[:5]]
    assert "other" not in shown.stdout and "5 records" in shown.stdout
    assert "attempt abababab" in shown.stdout and "FAILED" in shown.stdout
    assert "error=target_not_found" in shown.stdout and "operator=bob" in shown.stdout
    assert "checks: patient_id(declarative)" in shown.stdout
    assert "acknowledged: patient_id" in shown.stdout
    as_json = [json.loads(line) for line in audit(lea_env, "show", "rp1", "--json")
               .stdout.splitlines()]
    assert [r["record_id"] for r in as_json] == [f"rp1:{i}" for i in range(5)]
    missing = audit(lea_env, "show", "no-such-replay")
    assert missing.returncode == 1 and "no audit record" in missing.stderr

    export = tmp_path / "audit.jsonl"
    with open(export, "w") as out:
        assert subprocess.run([sys.executable, "run.py", "audit", "export"], env=lea_env,
                              cwd=ROOT, stdout=out, timeout=60).returncode == 0
    exported = [json.loads(line) for line in export.read_text().splitlines()]
    assert [r["seq"] for r in exported if r["kind"] != "data_viewed"] == list(range(1, 7))
    # Each show, and this export, recorded who ran it (cli/audit_access.py).
    assert [r["data"]["what"] for r in exported if r["kind"] == "data_viewed"] == [
        "timeline"] * 3 + ["export"]
    assert audit(lea_env, "verify", "--jsonl", str(export)).returncode == 0
    later = audit(lea_env, "export", "--since", str(exported[0]["stored_at"] + 3600))
    assert later.returncode == 0 and later.stdout == ""

    pruned = audit(lea_env, "prune", "--prune-screenshots-older-than", "0",
                   "--operator", "carol")
    assert pruned.returncode == 0 and "removed 2 screenshot files" in pruned.stdout
    assert "(pruned)" in audit(lea_env, "show", "rp1").stdout
    verified = audit(lea_env, "verify")
    assert verified.returncode == 0, verified.stdout
    # The 6 appended, the prune, and 6 views: 4 shows and 2 exports (cli/audit_access.py).
    assert "13 records" in verified.stdout and "2 pruned by retention" in verified.stdout

    since_prune = audit(lea_env, "export", "--since", str(exported[-1]["stored_at"] + 1e-6))
    segment = tmp_path / "segment.jsonl"
    segment.write_text(since_prune.stdout)
    assert [json.loads(line)["kind"] for line in since_prune.stdout.splitlines()
            if json.loads(line)["kind"] != "data_viewed"] == ["screenshots_pruned"]
    checked = audit(lea_env, "verify", "--jsonl", str(segment))
    assert checked.returncode == 0 and "a segment" in checked.stdout
    hint = checked.stdout.split("audit verify --anchor ")[1].split()[0]
    assert hint == f"{exported[-1]['seq']}:{exported[-1]['hash']}"
    assert audit(lea_env, "verify", "--anchor", hint).returncode == 0

    tampered = tmp_path / "tampered.jsonl"
    text = export.read_text().replace('"operator": "bob"', '"operator": "eve"')
    tampered.write_text(text)
    result = audit(lea_env, "verify", "--jsonl", str(tampered))
    assert result.returncode == 1 and "seq 5 (record_id rp1:4): altered" in result.stdout


def test_commands_through_the_actor_say_when_it_is_not_there(
        lea_env: dict[str, str]) -> None:
    result = audit(lea_env, "show", "rp1", "--timeout", "0.3")
    assert result.returncode == 2 and "is the tree running" in result.stderr


def test_verify_works_on_a_copy_of_the_data_dir(trail: Path, lea_env: dict[str, str],
                                                tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(trail, copy)
    result = audit({**lea_env, "LEA_DATA_DIR": str(copy)}, "verify")
    assert result.returncode == 0 and "30 records" in result.stdout
