"""Where a test's history is: the trees and agents it started, found from the argv and the
environment of every process it spawned (tests/conftest.py: ``spawn``), their audit trails
and their effects logs; read as the auditor's tools read them (``audit verify``: the
database itself, read-only, in one snapshot).

The judgement is tests/history.py's; this module only reads.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import psycopg

from actors.audit_log.store.audit_store import iter_chain
from actors.audit_log.store.db import AuditDb, SqliteAuditDb
from actors.dispatcher.store.dispatcher_store import DB_NAME as DISPATCHER_DB
from actors.dispatcher.store.postgres import SCHEMA as PG_SCHEMA
from runtime import pg
from tests.history import Effect, Record, Verdict, check

ROOT = Path(__file__).resolve().parent.parent
_VALUED = ("--config", "--data-dir", "--console-port")  # run.py's global options with a value


@dataclass(frozen=True)
class Trail:
    """An audit trail: PostgreSQL at ``database_url``, else SQLite in ``data_dir``."""

    data_dir: Path
    database_url: str = ""

    def __str__(self) -> str:
        return "PostgreSQL" if self.database_url else str(self.data_dir)


@dataclass
class Watch:
    """What one test started: trees (their trails) and agents (their effects logs)."""

    trails: dict[Trail, list[subprocess.Popen[bytes]]] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)

    def alive(self) -> bool:
        return any(p.poll() is None for procs in self.trails.values() for p in procs)


def watch(node: Any) -> Watch:
    """The test item's watch (made at its first process)."""
    w = getattr(node, "history_watch", None)
    if not isinstance(w, Watch):
        w = node.history_watch = Watch()
    return w


def note_effects_log(node: Any, path: Path) -> None:
    """An agent started otherwise than by ``spawn`` (under Wine) writes to ``path``."""
    logs = watch(node).logs
    if path not in logs:
        logs.append(path)


def note_process(node: Any, argv: Sequence[str], env: Mapping[str, str],
                 proc: subprocess.Popen[bytes]) -> None:
    """Remember what a spawned process is to the history: a tree, an agent, or nothing."""
    args = [str(a) for a in argv]
    if "run.py" in (Path(a).name for a in args):
        rest = args[next(i for i, a in enumerate(args) if Path(a).name == "run.py") + 1:]
        command = _command(rest)
        if command in (None, "up"):
            watch(node).trails.setdefault(_trail(rest, env), []).append(proc)
            return
        if command != "agent":
            return
    elif ("-m", "agent") not in pairwise(args):
        return
    log = _option(args, "--effects-log")
    if log is not None:
        note_effects_log(node, (ROOT / log).resolve())


def _option(args: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _command(args: Sequence[str]) -> str | None:
    """run.py's command word, after any global options (None: ``up``)."""
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in _VALUED:
            skip = True
        elif not a.startswith("-"):
            return a
    return None


def _trail(args: Sequence[str], env: Mapping[str, str]) -> Trail:
    """Where the tree keeps its trail: command line, environment, config file, default
    (docs/operations.md's precedence); relative paths from the directory tests run in."""
    config = _option(args, "--config") or env.get("LEA_CONFIG")
    table: dict[str, Any] = {}
    if config:
        with open(ROOT / config, "rb") as fh:
            table = tomllib.load(fh).get("lea", {})
    data_dir = (_option(args, "--data-dir") or env.get("LEA_DATA_DIR")
                or table.get("data_dir") or "var")
    url = env.get("LEA_DATABASE_URL") or table.get("database_url") or ""
    return Trail((ROOT / data_dir).resolve(), str(url))


def read_trail(trail: Trail) -> list[Record]:
    """The dispatcher's records in the trail, in order (none if there is no trail yet)."""
    try:
        db: AuditDb
        if trail.database_url:
            from actors.audit_log.store.postgres import PgAuditDb

            db = PgAuditDb.open_readonly(trail.database_url)
        else:
            db = SqliteAuditDb.open_readonly(trail.data_dir)
    except FileNotFoundError:
        return []
    try:
        with db.snapshot():
            return [Record(c.seq, c.kind, c.replay_id, c.at, c.data) for c in iter_chain(db)
                    if c.source == "dispatcher"]
    finally:
        db.close()


def read_log(path: Path) -> list[Effect]:
    """Every line of an effects log, named ``folder/file:line``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    name = f"{path.parent.name}/{path.name}"
    return [Effect.of(json.loads(line), f"{name}:{n}")
            for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def outbox_left(trail: Trail) -> int:
    """How many of the dispatcher's audit records have not reached the trail yet: the rows
    of its outbox (which holds nothing else: actors/dispatcher/store/dispatcher_store.py)."""
    try:
        if trail.database_url:
            conn = pg.connect(trail.database_url, wait_s=0.0)
            try:
                row = conn.execute(f"SELECT count(*) FROM {PG_SCHEMA}.outbox").fetchone()
            finally:
                conn.close()
        else:
            db = sqlite3.connect(f"file:{trail.data_dir / DISPATCHER_DB}?mode=ro", uri=True,
                                 timeout=5)
            try:
                row = db.execute("SELECT count(*) FROM outbox").fetchone()
            finally:
                db.close()
    except (OSError, sqlite3.Error, psycopg.Error):
        return 0  # no dispatcher store (yet), or out of reach: nothing to wait for
    return int(row[0]) if row else 0


def judge(w: Watch, wait_s: float = 10.0) -> Verdict:
    """The verdict on what ``w`` saw. While a tree runs, first wait (at most ``wait_s``)
    until every dispatcher's outbox has reached its trail: a test often ends as soon as its
    replay has, before the last records are in the trail.

    The trails are read before the effects logs: a replay the trail shows completed then
    has every one of its inputs in the logs read (each was written before its report)."""
    deadline = time.monotonic() + wait_s
    while w.alive() and time.monotonic() < deadline and any(
            outbox_left(t) for t in w.trails):
        time.sleep(0.05)
    # Trees sharing one PostgreSQL trail (a leader and its standby) are read once.
    trails = {t.database_url or t.data_dir: t for t in w.trails}.values()
    records = [r for trail in trails for r in read_trail(trail)]
    return check(records, [e for path in w.logs for e in read_log(path)],
                 inputs_seen=bool(w.logs))
