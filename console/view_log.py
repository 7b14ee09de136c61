"""Who saw a patient's data through the console: each view is an audit record (kind
``data_viewed``, source ``console``) committed before the data is sent (docs/operations.md,
"Who saw what").

A record says who (the account, its role, its session's short hash, or the token), from
which client address, what (``screenshot``, ``timeline``, ``replay``: a replay's detail and
pause) and which replay or image. If it cannot be committed, the data is not sent (the
request fails). A page that refreshes what it shows asks again and again: the same person
in the same session seeing the same thing again within :data:`VIEW_RECORD_PERIOD_S` is not
recorded again (the first view of the period is).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from fastapi import Request

from console.account_store import short
from console.auth import Principal, client_of, state_of
from messages.audit import DATA_VIEWED

VIEW_RECORD_PERIOD_S = 600.0
MAX_REMEMBERED = 10_000

What = Literal["screenshot", "timeline", "replay", "queue_item"]


@dataclass
class ViewLog:
    """The views recorded lately (to record a repeated one once per period)."""

    _until: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def record(self, request: Request, me: Principal, what: What, *,
               replay_id: str | None = None, sha256: str | None = None,
               queue: str | None = None, reference: str | None = None) -> None:
        """Record the view (raises if it cannot be committed: nothing is then shown)."""
        console = state_of(request)
        now = time.time()
        item = f"{queue}/{reference}" if reference is not None else ""
        key = (me.session or f"{me.via}:{client_of(request)}", what,
               replay_id or sha256 or item)
        if self._until.get(key, 0.0) > now:
            return
        console.accounts.record(DATA_VIEWED, now, {
            "account": me.account, "role": me.role, "via": me.via,
            "client": client_of(request), "what": what,
            **({"session": short(me.session)} if me.session else {}),
            **({"replay_id": replay_id} if replay_id else {}),
            **({"sha256": sha256} if sha256 else {}),
            **({"queue": queue, "reference": reference} if reference is not None else {})})
        console.audit.wake()
        if len(self._until) >= MAX_REMEMBERED:
            self._until = {k: t for k, t in self._until.items() if t > now}
        self._until[key] = now + VIEW_RECORD_PERIOD_S


def record_view(request: Request, me: Principal, what: What, *, replay_id: str | None = None,
                sha256: str | None = None, queue: str | None = None,
                reference: str | None = None) -> None:
    """:meth:`ViewLog.record` with the app's log (one per console process)."""
    log = getattr(request.app.state, "views", None)
    if not isinstance(log, ViewLog):
        log = request.app.state.views = ViewLog()
    log.record(request, me, what, replay_id=replay_id, sha256=sha256, queue=queue,
               reference=reference)
