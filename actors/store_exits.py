"""How an actor that keeps a database stops for it (docs/operations.md): a database out of
reach at start ends the process with :data:`UNAVAILABLE_EXIT`, and a connection lost later
ends it at once with :data:`LOST_EXIT`; either way the supervisor's restart policy applies,
and the restarted actor starts again from what the database holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from loguru import logger

LOST_EXIT = 75
"""Exit status when the database connection is lost, or a commit fails (EX_TEMPFAIL)."""
UNAVAILABLE_EXIT = 69
"""Exit status when the database cannot be reached at start (EX_UNAVAILABLE)."""

_T = TypeVar("_T")


def open_or_exit(actor: str, open_store: Callable[[], _T],
                 unavailable: type[Exception]) -> _T:
    """``open_store()``; an ``unavailable`` error is said in the log and ends the process."""
    try:
        return open_store()
    except unavailable as exc:
        logger.error("{}: {}; exiting ({})", actor, exc, UNAVAILABLE_EXIT)
        raise SystemExit(UNAVAILABLE_EXIT) from None


def exit_on_loss(actor: str) -> Callable[[BaseException], None]:
    """What to call when the connection is lost: what the actor holds may be ahead of what
    is committed, so nothing more may go out: it logs why and stops at once."""
    def lost(exc: BaseException) -> None:
        logger.error("{}: lost the database connection ({}); stopping", actor,
                     str(exc).strip())
        os._exit(LOST_EXIT)

    return lost
