"""The dispatcher's storage: its tables and group commit (dispatcher_store.py), run on SQLite
or PostgreSQL (db.py, postgres.py; which one: open.py), the leader's lease table and the WAL
checkpoints (docs/durability.md)."""
