"""The watchdog actor process."""

from __future__ import annotations

from actors.base import Actor


class WatchdogActor(Actor):
    """Keeps the timers of in-flight actions and asks the dispatcher to resend or give up."""

    service = "watchdog"
