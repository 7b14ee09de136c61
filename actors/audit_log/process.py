"""The audit_log actor process."""

from __future__ import annotations

from actors.base import Actor


class AuditLogActor(Actor):
    """Keeps the append-only, hash-chained audit trail."""

    service = "audit_log"
