"""The peers' side of the wire: MDP/0.2 client and worker, frames, the event bus,
peer identity, CURVE key files."""
