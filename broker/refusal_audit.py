"""The broker's refusals in the audit trail: committed to the supervisor's outbox.

A refused READY is a peer trying to take work that is not its own: a patient-safety officer
must find it in the audit trail, not only in a log. The broker cannot wait for audit_log (a
peer of its own), so the record is committed to the tree's audit outbox
(``<data_dir>/supervisor.sqlite3``, audit_outbox/store.py) with source ``broker``; the
supervisor sends the outbox to audit_log and deletes what it acknowledged, as it does for
its own records. A flood of refusals writes at most :data:`RECORDS_PER_S` records a second;
the next record says how many were left out (``suppressed``).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from loguru import logger

from audit_outbox.store import DB_NAME, AuditOutbox
from runtime.rate_limit import RateLimit

SOURCE = "broker"
RECORDS_PER_S = 5.0


class RefusalAudit:
    """``record(kind, data, now)``: one audit record, never raises (the broker goes on)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / DB_NAME
        self._outbox: AuditOutbox | None = None  # opened at the first refusal
        self._limit = RateLimit(RECORDS_PER_S)
        self._log_limit = RateLimit(1.0)
        self.suppressed = 0
        self.lost = 0

    def record(self, kind: str, data: dict[str, Any], now: float) -> None:
        if not self._limit.allow(now):
            self.suppressed += 1
            return
        if self.suppressed:
            data = {**data, "suppressed": self.suppressed}
        try:
            if self._outbox is None:
                self._outbox = AuditOutbox(self.path)
            self._outbox.add(SOURCE, kind, time.time(), data)
            self.suppressed = 0
        except (OSError, sqlite3.Error, ValueError, TypeError) as exc:
            self.lost += 1
            if self._log_limit.allow(now):
                logger.error("broker: audit record {} could not be kept in {}: {} ({} lost)",
                             kind, self.path, exc, self.lost)

    def close(self) -> None:
        if self._outbox is not None:
            self._outbox.close()
            self._outbox = None
