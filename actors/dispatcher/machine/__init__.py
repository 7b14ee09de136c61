"""The dispatcher's pure state machine: its state, its rules, one handler module per kind of
input (agent, control, consultation, watchdog, queue) and the effects a decision returns.
Nothing here reads a clock, a socket or a disk (docs/architecture.md)."""
