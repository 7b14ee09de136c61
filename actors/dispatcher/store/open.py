"""Which store the dispatcher opens: SQLite in the data directory (the embedded default), or
PostgreSQL when ``database_url`` (``LEA_DATABASE_URL``) is set (docs/operations.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from actors.dispatcher.store.dispatcher_store import DispatcherStore
from runtime.liveness import Beacon
from runtime.settings import Settings

if TYPE_CHECKING:
    from actors.dispatcher.store.lease import LeaseDb


def open_store(settings: Settings,
               on_lost: Callable[[BaseException], None] | None = None,
               lead: Callable[[LeaseDb], None] | None = None) -> DispatcherStore:
    """The dispatcher's store as ``settings`` say. ``on_lost``: called when the database
    connection is lost (PostgreSQL). ``lead(db)``: on PostgreSQL, returns once this process
    leads (actors/dispatcher/leader/election.py); the store reads the database only then. Raises
    :class:`~actors.dispatcher.store.db.StoreUnavailable` if the server cannot be reached."""
    if not settings.database_url:
        return DispatcherStore.in_dir(settings.data_dir)
    # psycopg is imported only by a dispatcher that uses PostgreSQL.
    from actors.dispatcher.store.postgres import PgDb

    # The wait for the server is bounded and beats (runtime/liveness.py): the supervisor
    # sees a dispatcher waiting, not a hung one.
    beacon = Beacon.from_env()
    db = PgDb.connect(settings.database_url, on_lost, waiting=beacon.beat)
    if lead is not None:
        lead(db)
    return DispatcherStore(db)
