"""Audit records on their way to the audit_log actor: the local outbox store, the
sender that retries, and the link that drains an outbox."""
