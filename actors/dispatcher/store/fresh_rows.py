"""The outbox rows a dispatcher committed, kept as written for the audit sender.

Every tick of the audit sender asks for the rows committed since its last batch
(``DispatcherStore.pending_outbox``); reading them back from the database and decoding them
again is work done twice for the rows this process wrote itself. They are kept here until
the sender has read past them; a predecessor's rows, and rows beyond :data:`FRESH_ROWS` (the
audit trail does not take them: down?), are read from the database
(docs/durability.md, "Dispatcher: group commit").
"""

from __future__ import annotations

from collections.abc import Iterable

from actors.dispatcher.machine.decision import Effect

FRESH_ROWS = 10_000
"""Committed outbox rows kept in memory for the audit sender at most."""


class FreshRows:
    """Rows committed above ``durable_id`` (the highest id on disk when the store opened)."""

    def __init__(self, durable_id: int) -> None:
        self._rows: dict[int, Effect] = {}
        self._from = durable_id  # every committed row above it is in ``_rows``

    def committed(self, written: list[tuple[int, Effect]], deleted: Iterable[int]) -> None:
        """A turn committed ``written`` rows and deleted the ``deleted`` ones."""
        for done in deleted:
            self._rows.pop(done, None)
        if len(self._rows) + len(written) <= FRESH_ROWS:
            self._rows.update(written)
        elif written:  # from here on, the database holds what comes up to these rows
            self._rows.clear()
            self._from = max(self._from, *(i for i, _ in written))

    def read(self, after: int, upto: int, limit: int | None) -> list[tuple[int, Effect]] | None:
        """The rows above ``after`` up to ``upto`` (committed), oldest first, at most
        ``limit``; None if some of them are only in the database."""
        if after < self._from:
            return None
        for done in [i for i in self._rows if i <= after]:
            del self._rows[done]  # read already: the sender keeps what it must resend
        return sorted(((i, e) for i, e in self._rows.items() if i <= upto),
                      key=lambda row: row[0])[:limit]
