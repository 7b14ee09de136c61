"""The supervisor console: a web page where a person follows replays and answers pauses.

A child of the supervisor (``python run.py`` starts it on ``--console-port``, default 8765,
127.0.0.1); a client of the broker and a watcher of the bus like any other
(docs/architecture.md).
"""
