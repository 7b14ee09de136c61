"""OTP-style supervision of the tree's OS processes.

- :mod:`supervision.policy`: the pure restart policy (strategies, restart types, intensity).
- :mod:`runtime.liveness`: the heartbeat pipe between a child and its supervisor.
- :mod:`supervision.supervisor`: the supervisor loop, with :mod:`supervision.child`.

Kept import-free on purpose: children import :mod:`runtime.liveness` for their beacon and
must not pay for zmq/pydantic/loguru at start-up because of this package.
"""
