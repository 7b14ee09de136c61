"""The loop_detector actor process."""

from __future__ import annotations

from actors.base import Actor


class LoopDetectorActor(Actor):
    """Notices an agent going round in circles (spec/01 §5)."""

    service = "loop_detector"
