"""The audit trail's storage: the chain's SQL (audit_store.py), run on SQLite with image files
or on PostgreSQL (db.py, postgres.py; which one: open.py) (docs/durability.md)."""
