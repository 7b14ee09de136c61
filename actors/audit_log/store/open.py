"""Where the audit trail is: SQLite in the data directory (the embedded default), or
PostgreSQL when ``database_url`` (``LEA_DATABASE_URL``) is set (docs/operations.md).

An unreachable server raises :class:`runtime.pg.DatabaseUnavailable` (imported with psycopg,
by a process that uses PostgreSQL only)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.store.audit_store import AuditStore
from actors.audit_log.store.db import AuditDb, SqliteAuditDb, default_keyring
from runtime.liveness import Beacon
from runtime.settings import Settings


def keyring_path(settings: Settings) -> Path:
    """The screenshots' keyring (``LEA_IMAGE_KEYRING``; image_keys.py)."""
    return Path(settings.image_keyring) if settings.image_keyring else default_keyring(
        settings.data_dir)


def open_store(settings: Settings,
               on_lost: Callable[[BaseException], None] | None = None) -> AuditStore:
    """The actor's store as ``settings`` say. ``on_lost``: called when the database
    connection is lost (PostgreSQL)."""
    cipher = ImageCipher(keyring_path(settings))  # loaded by the store (it may create it)
    if not settings.database_url:
        return AuditStore(settings.data_dir, SqliteAuditDb.open(settings.data_dir, cipher))
    from actors.audit_log.store.postgres import PgAuditDb

    # The wait for the server is bounded and beats (runtime/liveness.py): the supervisor
    # sees an actor waiting, not a hung one.
    db = PgAuditDb.connect(settings.database_url, cipher, on_lost, waiting=Beacon.from_env().beat,
                           lock_wait_s=settings.beacon_timeout_s / 2)
    try:
        return AuditStore(settings.data_dir, db)
    except BaseException:
        db.close()
        raise


def open_reader(settings: Settings) -> AuditDb:
    """The trail for reading only (``audit verify``); FileNotFoundError if there is none.
    Its images open with the keyring if it can be read (``images.cipher.problem`` else)."""
    cipher = ImageCipher(keyring_path(settings))
    cipher.load()
    if not settings.database_url:
        return SqliteAuditDb.open_readonly(settings.data_dir, cipher)
    from actors.audit_log.store.postgres import PgAuditDb

    return PgAuditDb.open_readonly(settings.database_url, cipher)
