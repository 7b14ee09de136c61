"""The dispatcher actor process."""

from __future__ import annotations

from actors.base import Actor


class DispatcherActor(Actor):
    """Owns replays, their queues and in-flight actions, and the state machine of spec/03."""

    service = "dispatcher"
