"""A token bucket for what must not flood: events about bad input, repeated warnings."""

from __future__ import annotations

import time


class RateLimit:
    """A token bucket: ``allow()`` is True at most ``rate`` times a second (bursts of ``rate``)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.stamp = time.monotonic()
        self.dropped = 0

    def allow(self, now: float) -> bool:
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.dropped += 1
        return False
