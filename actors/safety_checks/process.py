"""The safety_checks actor process."""

from __future__ import annotations

from actors.base import Actor


class SafetyChecksActor(Actor):
    """Builds the checklist a person acknowledges before a critical step (spec/01 §6)."""

    service = "safety_checks"
