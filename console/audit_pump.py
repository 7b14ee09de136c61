"""The console's audit records on their way to audit_log, from the event loop.

The records are committed in the console's database (console/account_store.py) with the
change they record; this task sends that outbox with the supervisor's own link
(audit_outbox/audit_link.py: one batch in flight, re-sent after a failure or a restart of
either side, a row deleted only once audit_log has it). It looks at the outbox again every
:data:`LOOK_S`, since ``run.py accounts`` commits there from another process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import zmq

from audit_outbox.audit_link import AuditLink
from audit_outbox.store import AuditOutbox
from console.account_store import SOURCE

PUMP_S = 0.2
LOOK_S = 1.0


class AuditPump:
    def __init__(self, endpoints: str | Sequence[str], db_path: Path) -> None:
        self._ctx: zmq.Context[Any] = zmq.Context()
        self.link = AuditLink(self._ctx, endpoints, AuditOutbox(db_path), SOURCE)

    def wake(self) -> None:
        """New rows were committed: send them at the next turn."""
        self.link.sender.notify()

    async def run(self) -> None:
        """Until cancelled; never blocks the loop longer than a read of the outbox."""
        looked = 0.0
        while True:
            now = time.monotonic()
            if now - looked >= LOOK_S:
                self.link.sender.notify()
                looked = now
            self.link.pump(now)
            await asyncio.sleep(PUMP_S)

    def close(self) -> None:
        self.link.close()
        self._ctx.term()
