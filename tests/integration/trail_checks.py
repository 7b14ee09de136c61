"""What a test reads to prove the audit trail complete: the trail through ``python run.py
audit ...`` (the operator's commands), and what the senders and the agent know they did
(the dispatcher's reports log and outbox, the supervisor's outbox, the agent's effects log),
read from their files read-only while they run."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from actors.dispatcher.store.dispatcher_store import DB_NAME as DISPATCHER_DB
from audit_outbox.store import DB_NAME as SUPERVISOR_DB
from runtime.sqlite_store import EPOCH_BITS
from tests.conftest import ROOT, python_argv

DISPATCH_KINDS = ("action_dispatched", "action_resent")


def _query(path: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def outbox_rows(data_dir: Path, which: str) -> list[int]:
    """Ids of the rows still in the dispatcher's or the supervisor's outbox."""
    path = data_dir / (DISPATCHER_DB if which == "dispatcher" else SUPERVISOR_DB)
    return [i for (i,) in _query(path, "SELECT id FROM outbox ORDER BY id")]


def store_id(data_dir: Path, which: str) -> str:
    path = data_dir / (DISPATCHER_DB if which == "dispatcher" else SUPERVISOR_DB)
    return str(_query(path, "SELECT value FROM meta WHERE key = 'store_id'")[0][0])


def reports_log(data_dir: Path, replay_id: str) -> Counter[tuple[str, str, str]]:
    """(action_id, attempt_id, status) of every report the dispatcher received."""
    return Counter(_query(data_dir / DISPATCHER_DB, "SELECT action_id, attempt_id, status "
                          "FROM reports WHERE replay_id = ?", replay_id))


def run_cli(env: dict[str, str], *args: str, timeout: float = 60.0
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(python_argv("run.py", *args), env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, check=False)


def show_json(env: dict[str, str], replay_id: str) -> list[dict[str, Any]]:
    """``audit show REPLAY_ID --json``: the replay's records in chain order."""
    done = run_cli(env, "audit", "show", replay_id, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def export_all(env: dict[str, str]) -> list[dict[str, Any]]:
    """``audit export``: every record of the trail."""
    done = run_cli(env, "audit", "export")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def verify(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(env, "audit", "verify")


def rows_of(records: Iterable[dict[str, Any]], source: str, store: str) -> Counter[int]:
    """How many records of the trail carry each outbox row id of one sender's store."""
    pattern = re.compile(rf"^{re.escape(source)}:{re.escape(store)}:(\d+)$")
    return Counter(int(m.group(1)) for r in records
                   if (m := pattern.match(r["record_id"])) is not None)


def assert_rows_complete(records: list[dict[str, Any]], source: str, store: str) -> int:
    """Every row the sender ever committed is in the trail once: ids are never reused, and
    within an epoch (each open of the outbox, runtime/sqlite_store.py) they run from the
    epoch's first id without a gap. Returns how many rows."""
    rows = rows_of(records, source, store)
    assert rows, f"no {source} record in the trail"
    epochs: dict[int, list[int]] = {}
    for i in rows:
        epochs.setdefault(i >> EPOCH_BITS, []).append(i)
    missing = sorted(i for epoch, ids in epochs.items()
                     for i in set(range((epoch << EPOCH_BITS) + 1, max(ids) + 1)) - set(ids))
    assert not missing, f"{source} rows lost on the way: {missing[:20]}"
    assert all(c == 1 for c in rows.values())  # record_id is unique in audit.db anyway
    return len(rows)


def dispatches(records: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """(action_id, attempt_id) of every dispatch record."""
    return Counter((r["data"]["action_id"], r["data"]["attempt_id"])
                   for r in records if r["kind"] in DISPATCH_KINDS)


def reports(records: list[dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    """(action_id, attempt_id, status) of every report_received record."""
    return Counter((r["data"]["report"]["action_id"], r["data"]["report"]["attempt_id"],
                    r["data"]["status"]) for r in records if r["kind"] == "report_received")


def assert_replay_complete(records: list[dict[str, Any]], steps: list[str],
                           log: Counter[tuple[str, str, str]],
                           effects: list[dict[str, Any]], *, same_attempts: bool) -> None:
    """Every dispatch and every report of the replay is in its timeline exactly once.

    ``same_attempts``: the dispatcher was not restarted, so each input the agent performed
    was accepted under the attempt it was performed for (after a restart the dispatcher
    re-sends under a new attempt, and the old attempt's late report is ``stale``).
    """
    sent = dispatches(records)
    assert all(n == 1 for n in sent.values()), [k for k, n in sent.items() if n > 1]
    first = Counter(r["data"]["action_id"] for r in records
                    if r["kind"] == "action_dispatched")
    assert first == Counter(steps), "each step is dispatched (first time) exactly once"
    got = reports(records)
    assert got == log, (f"reports: {sum((got - log).values())} extra, "
                        f"{sum((log - got).values())} missing in the trail")
    attempts = {attempt for _action, attempt in sent}
    assert all(attempt in attempts for _action, attempt, _status in log), \
        "a report of an attempt with no dispatch record"
    for effect in effects:  # every input performed: its dispatch and its accepted report
        assert (effect["action_id"], effect["attempt_id"]) in sent, effect
        if same_attempts:
            assert log[(effect["action_id"], effect["attempt_id"], "accepted")] == 1, effect
    kinds = Counter(r["kind"] for r in records)
    assert kinds["replay_started"] == 1 and kinds["replay_completed"] == 1, kinds
