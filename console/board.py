"""The replay list as the console keeps it: the dispatcher's summaries, plus the last bus event
of each replay. Pure: no sockets, no clock; the app feeds it and publishes what changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from console import labels
from console.views import LastEvent, ReplayRow, row
from messages.events import Event
from messages.replay import ReplaySummary


class Board:
    def __init__(self) -> None:
        self._summaries: dict[str, ReplaySummary] = {}
        self._last: dict[str, LastEvent] = {}
        self._step: dict[str, str] = {}
        self._shown: dict[str, ReplayRow] = {}

    def note(self, event: Event) -> str | None:
        """Remember ``event`` as its replay's last one; the replay id, if it names one."""
        replay_id = event.data.get("replay_id")
        if not isinstance(replay_id, str) or not replay_id:
            return None
        step = event.data.get("action_id")
        if isinstance(step, str) and step:
            self._step[replay_id] = step
        if event.topic not in labels.QUIET_TOPICS:
            previous = self._last.get(replay_id)
            if previous is None or previous.at <= event.at:
                self._last[replay_id] = LastEvent(
                    topic=event.topic, text=labels.happening(event.topic, event.data),
                    at=event.at)
        return replay_id

    def remember(self, replay_id: str, kind: str, data: dict[str, Any], at: float) -> None:
        """A last event from the audit trail, for a replay with none from the bus (it ran
        before the console started); the bus's own events win."""
        if replay_id not in self._last:
            self._last[replay_id] = LastEvent(topic=kind, text=labels.happening(kind, data),
                                              at=at)

    def has_last(self, replay_id: str) -> bool:
        return replay_id in self._last

    def apply(self, summaries: Iterable[ReplaySummary]) -> list[ReplayRow]:
        """Take the dispatcher's word for these replays; the rows that changed."""
        changed = []
        for summary in summaries:
            self._summaries[summary.replay_id] = summary
            shown = self.row(summary.replay_id)
            if shown is not None and self._shown.get(summary.replay_id) != shown:
                self._shown[summary.replay_id] = shown
                changed.append(shown)
        return changed

    def refresh_event(self, replay_id: str) -> ReplayRow | None:
        """The row again after a new last event, if it changed."""
        shown = self.row(replay_id)
        if shown is None or self._shown.get(replay_id) == shown:
            return None
        self._shown[replay_id] = shown
        return shown

    def row(self, replay_id: str) -> ReplayRow | None:
        summary = self._summaries.get(replay_id)
        if summary is None:
            return None
        return row(summary, self._last.get(replay_id), self._step.get(replay_id))

    def rows(self) -> list[ReplayRow]:
        """Every replay, the ones that need a person first, then the newest first."""
        out = [r for rid in self._summaries if (r := self.row(rid)) is not None]
        return sorted(out, key=lambda r: (r.status != "paused_need_help",
                                          r.status not in ("running", "paused_need_help"),
                                          -r.created_at))

    def summary(self, replay_id: str) -> ReplaySummary | None:
        return self._summaries.get(replay_id)
