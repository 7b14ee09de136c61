"""The leader's lease among dispatchers sharing one PostgreSQL database, and its fencing
token (docs/operations.md, "Several dispatchers"; the election around it:
actors/dispatcher/leader/election.py).

One row, ``dispatcher.leader``: the fencing ``token`` (bumped by each new leader), the
``pid`` of the leader's session (its store's connection, ``pg_backend_pid()``) and when the
lease expires, on the server's clock (``clock_timestamp()``: the dispatchers' clocks never
compare). The leader renews it every :data:`RENEW_EVERY_S`; a standby takes it over

- at once when the leader's session is gone (kill -9 of the leader: its socket is closed and
  its backend ends), or
- once it has expired (the leader cut off, or stopped): it first ends the old leader's
  session (``pg_terminate_backend``), which may still hold row locks the new leader would
  wait for until the server's TCP keepalives gave it up, and whose transaction must never
  commit.

Every turn of a leader begins by checking its token in the same transaction
(``dispatcher.fence``, postgres.py: ``SELECT ... FOR SHARE`` of the row, so a takeover waits
for the turn to end): a deposed leader's next commit fails, and a takeover sees every turn
the old leader committed.
"""

from __future__ import annotations

from typing import Protocol

from actors.dispatcher.store.db import StoreDb

LEASE_MIN_S = 1.5
"""The shortest lease (:func:`lease_s`): a loaded host's leader must not miss it for a
moment's stall."""
LEASE_S = 3.0
"""The lease of the default heartbeat (1 s × 3)."""


def lease_s(heartbeat_expiry_s: float) -> float:
    """How long a lease lasts unrenewed: a cut-off leader is replaced this long after its
    last renewal (docs/operations.md, "Several dispatchers"). The heartbeat expiry, as for
    any peer given up (the broker pair takes over in as long, at the same time), and
    :data:`LEASE_MIN_S` at least."""
    return max(heartbeat_expiry_s, LEASE_MIN_S)
RENEW_EVERY_S = 0.25
"""How often the leader renews its lease (many renewals per lease: a loaded host may miss
some)."""
END_WAIT_MS = 1000
"""How long a standby waits for the session of a leader whose lease expired to end."""

TABLE = """
CREATE TABLE IF NOT EXISTS leader (
    id INTEGER PRIMARY KEY CHECK (id = 1), token BIGINT NOT NULL, pid INTEGER,
    expires_at TIMESTAMPTZ NOT NULL);
INSERT INTO leader VALUES (1, 0, NULL, '-infinity') ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION fence(expected BIGINT) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM leader WHERE id = 1 AND token = expected FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'deposed: the leader''s fencing token is no longer %', expected
            USING ERRCODE = 'LEA01';
    END IF;
END $$;
"""
"""The lease's table and the fence (in the dispatcher's schema: postgres.py)."""

DEPOSED = "LEA01"
"""The SQLSTATE of a turn refused by the fence."""


class LeaseDb(StoreDb, Protocol):
    """The store's PostgreSQL session: each turn it begins checks ``fence_token``."""

    fence_token: int | None


def take(db: LeaseDb, hold_s: float = LEASE_S, end_wait_ms: int = END_WAIT_MS) -> bool:
    """Take the lease for ``hold_s`` if nobody holds it (the leader's session is gone, or its
    lease expired); never waits for a live leader. On success ``db.fence_token`` is the new
    token."""
    row = db.execute(
        "SELECT token, pid, expires_at < clock_timestamp(), pid IS NULL OR NOT EXISTS "
        "(SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.pid) FROM leader l WHERE id = 1"
    ).fetchone()
    token, pid, expired, gone = row
    if not (expired or gone):
        return False
    if not gone:
        (ended,) = db.execute("SELECT pg_terminate_backend(?, ?)", (pid, end_wait_ms)
                              ).fetchone()
        if not ended:
            return False  # still there: tried again at the next look
    row = db.execute(
        "UPDATE leader SET token = token + 1, pid = pg_backend_pid(), "
        "expires_at = clock_timestamp() + make_interval(secs => ?) "
        "WHERE id = 1 AND token = ? RETURNING token", (hold_s, token)).fetchone()
    if row is None:
        return False  # another standby took it first
    db.fence_token = int(row[0])
    return True


def renew(db: LeaseDb, hold_s: float = LEASE_S) -> bool:
    """Extend our lease by ``hold_s``; False if it is no longer ours (another dispatcher took
    it over)."""
    if db.fence_token is None:
        return False
    row = db.execute(
        "UPDATE leader SET expires_at = clock_timestamp() + make_interval(secs => ?) "
        "WHERE id = 1 AND token = ? RETURNING token", (hold_s, db.fence_token)).fetchone()
    return row is not None
