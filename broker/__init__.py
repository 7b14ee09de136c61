"""MDP/0.2 (ZeroMQ RFC 18): the broker, its client and worker APIs, and the event bus."""
