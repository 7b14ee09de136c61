"""The watchdog's decisions (docs/architecture.md), pure: which in-flight actions are orphans, and
whether to ask the dispatcher to resend them or to give up. Time is passed in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from messages.dispatch import InFlight, OrphanGiveUp, OrphanResend


class WatchdogConfig(BaseSettings):
    """The origin spec's env vars, names and defaults kept but 45 s (docs/operations.md)."""

    model_config = SettingsConfigDict(env_prefix="RPA_WATCHDOG_", frozen=True)

    enabled: bool = True
    scan_interval_s: float = Field(10.0, gt=0)
    orphan_timeout_s: float = Field(45.0, gt=0)
    max_resends: int = Field(2, ge=0)
    repush_position: Literal["head"] = "head"
    """Where an orphan goes back in its replay's queue. Only ``head``: at the tail, later
    steps would run before the one that got no answer (one action in flight per session,
    in order, docs/architecture.md); ``tail`` is refused at start rather than read and ignored."""

    @field_validator("repush_position", mode="before")
    @classmethod
    def _head_only(cls, value: object) -> object:
        if value != "head":
            raise ValueError(
                f"{value!r} is not supported: an orphan is always re-sent at the head of its "
                "replay (a later step must never run before it); remove the setting or set "
                "it to head")
        return value


@dataclass(slots=True)
class _Timer:
    entry: InFlight
    started: float  # on the watchdog's clock
    asked_at: float | None = None  # when we last asked the dispatcher about this attempt


def _key(entry: InFlight) -> tuple[str, str]:
    # Action ids are unique within a replay only: one workflow may run on two machines.
    return (entry.replay_id, entry.action_id)


class WatchdogCore:
    """The table of in-flight actions: one timer per (replay, action), for its latest attempt."""

    def __init__(self, config: WatchdogConfig) -> None:
        self.config = config
        self._timers: dict[tuple[str, str], _Timer] = {}
        self._attempts: dict[str, tuple[str, str]] = {}  # attempt_id -> key

    def __len__(self) -> int:
        return len(self._timers)

    def entries(self) -> list[InFlight]:
        """The attempts timed now, one per (replay, action)."""
        return [timer.entry for timer in self._timers.values()]

    def track(self, entry: InFlight, now: float, age_s: float = 0.0) -> None:
        """Start (or restart, for a new attempt) the timer of ``entry``, ``age_s`` old."""
        key = _key(entry)
        previous = self._timers.get(key)
        if previous is not None:
            self._attempts.pop(previous.entry.attempt_id, None)
        self._timers[key] = _Timer(entry, now - max(0.0, age_s))
        self._attempts[entry.attempt_id] = key

    def untrack(self, action_id: str, attempt_id: str) -> bool:
        """Stop the timer of ``attempt_id`` if it is still the latest attempt of its action."""
        key = self._attempts.get(attempt_id)
        if key is None or key[1] != action_id:
            return False
        del self._attempts[attempt_id]
        del self._timers[key]
        return True

    def rebuild(self, entries: list[InFlight], now: float, wall_now: float) -> None:
        """Add the dispatcher's in-flight actions we do not track, keeping their real age.

        A merge, not a replace: a Track that overtook the list is newer than the list. An
        entry the list holds but the dispatcher has since finished is dropped when the
        dispatcher answers our question about it.
        """
        for entry in entries:
            if _key(entry) not in self._timers:
                self.track(entry, now, age_s=wall_now - entry.dispatched_at)

    def unanswered(self, action_id: str, attempt_id: str) -> None:
        """Our question got no answer (dispatcher down): ask again at the next scan."""
        key = self._attempts.get(attempt_id)
        if key is not None and key[1] == action_id:
            self._timers[key].asked_at = None

    def scan(self, now: float) -> list[OrphanResend | OrphanGiveUp]:
        """The questions to ask the dispatcher now (docs/architecture.md: an orphan is resent or
        given up)."""
        if not self.config.enabled:
            return []
        questions: list[OrphanResend | OrphanGiveUp] = []
        for timer in self._timers.values():
            age = now - timer.started
            patience = self.config.orphan_timeout_s + timer.entry.patience_s
            if age <= patience or timer.asked_at is not None:
                continue
            timer.asked_at = now
            entry = timer.entry
            if entry.resent_count < self.config.max_resends:
                questions.append(OrphanResend(action_id=entry.action_id,
                                              attempt_id=entry.attempt_id, age_s=age,
                                              position=self.config.repush_position))
            else:
                questions.append(OrphanGiveUp(action_id=entry.action_id,
                                              attempt_id=entry.attempt_id, age_s=age,
                                              resent_count=entry.resent_count))
        return questions
