"""The monitor_router actor: resolves which monitor of an agent an action targets
(docs/screens-and-pauses.md)."""
