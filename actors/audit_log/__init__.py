"""The audit_log actor: keeps the append-only, hash-chained audit trail."""
