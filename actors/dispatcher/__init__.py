"""The dispatcher actor: replays, queues, in-flight actions and the state machine of
docs/architecture.md."""
