"""Leader election among dispatchers sharing one PostgreSQL database: the role's rules
(role.py, pure) and the election that applies them (election.py; docs/operations.md,
"Several dispatchers")."""
