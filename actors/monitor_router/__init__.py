"""The monitor_router actor: resolves which monitor of an agent an action targets (spec/01 §4)."""
