"""How the agent reaches the broker and stays known there: the connection (broker_link.py),
its own SSH tunnel (tunnel.py), CURVE keys and handshakes (curve_link.py), and the screen
heartbeats to monitor_router (heartbeat.py). docs/protocol.md."""
