"""The workflow language's rules (setup chain, declared safety checks, pause messages,
monitor routing) over the wire models of :mod:`messages`."""
