"""The dispatcher's state and the transaction of one decision.

:class:`ReplayBook` is the one owner of the replays and of the indexes kept beside them;
:class:`Tx` (from :meth:`ReplayBook.begin`) collects what one input changes: the replays to
write, the effects to perform. Every handler module (``agent_inputs``, ``control_inputs``,
``watchdog_inputs``, ``consult_inputs``, ``queue_inputs``) and every step (``steps``)
receives the ``Tx`` explicitly.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.dispatcher.machine.decision import AuditRecord, Decision, Effect, PublishEvent
from actors.dispatcher.machine.invariants import check_invariants
from actors.dispatcher.machine.queue_book import Key, QueueBook, QueueDef, QueueItem
from actors.dispatcher.machine.state import DispatcherConfig, DispatcherState, ReplayState
from messages.base import Message


class ReplayBook:
    """The replays, in memory, and the indexes that find them fast."""

    def __init__(self, config: DispatcherConfig, new_id: Callable[[], str],
                 state: DispatcherState | None = None) -> None:
        self.config = config
        self.new_id = new_id
        self.state = state if state is not None else DispatcherState()
        # attempt_id -> replay_id of every action in flight: attempt ids are globally unique,
        # action ids only within a replay (one workflow may run on two machines at once).
        self.attempts: dict[str, str] = {
            r.inflight.attempt_id: r.replay_id
            for r in self.state.replays.values() if r.inflight is not None}
        # session_id -> its replays in memory, oldest first: the session's owner is looked up
        # at every step, and a scan of every finished replay kept would cost more.
        self._sessions: dict[str, list[ReplayState]] = {}
        for r in sorted(self.state.replays.values(), key=lambda r: r.seq):
            self._sessions.setdefault(r.session_id, []).append(r)
        # Work queues and their items (queue_inputs.py); ``settle`` is given every decision
        # before it is made, to carry what happened to a replay over to its item.
        self.queues = QueueBook()
        self.settle: Callable[[Tx], None] | None = None

    @property
    def replays(self) -> dict[str, ReplayState]:
        return self.state.replays

    def begin(self, now: float) -> Tx:
        """The transaction of one decision taken at ``now``."""
        return Tx(self, now)

    def check_invariants(self, decision: Decision | None = None) -> None:
        """Raise AssertionError naming the first broken invariant (I1-I6 and ours)."""
        check_invariants(self.state.replays, self.attempts, decision)

    # Lookups ------------------------------------------------------------------------------

    def active(self) -> list[ReplayState]:
        """The replays not finished, oldest first."""
        return sorted((r for r in self.replays.values() if r.active), key=lambda r: r.seq)

    def owner(self, session_id: str) -> ReplayState | None:
        """The replay whose turn it is on a session: the oldest one not finished."""
        return next((r for r in self._sessions.get(session_id, ()) if r.active), None)

    def current(self, action_id: str, attempt_id: str) -> ReplayState | None:
        """The replay whose in-flight action is exactly this attempt (I5), or None."""
        rid = self.attempts.get(attempt_id)
        r = self.replays.get(rid) if rid is not None else None
        if r is None or r.inflight is None or r.inflight.action.action_id != action_id:
            return None
        return r

    # Changes ------------------------------------------------------------------------------

    def add(self, r: ReplayState) -> None:
        """A new replay, the newest of its session."""
        if r.replay_id in self.replays:
            raise ValueError(f"new_id returned an existing replay id {r.replay_id!r}")
        self.replays[r.replay_id] = r
        self._sessions.setdefault(r.session_id, []).append(r)

    def bind_attempt(self, r: ReplayState) -> None:
        """Index ``r``'s in-flight attempt (I5: an attempt id is used once)."""
        e = r.inflight
        if e is None:
            raise ValueError(f"replay {r.replay_id} has nothing in flight")
        if e.attempt_id in self.attempts:
            raise ValueError(f"new_id returned an attempt id in use {e.attempt_id!r}")
        self.attempts[e.attempt_id] = r.replay_id

    def unbind_attempt(self, attempt_id: str) -> None:
        self.attempts.pop(attempt_id, None)

    def evict_finished(self) -> None:
        """Forget the oldest finished replays past the limit (they stay in the store)."""
        done = sorted((r for r in self.replays.values() if not r.active), key=lambda r: r.seq)
        for r in done[:max(0, len(done) - self.config.max_finished_replays)]:
            del self.replays[r.replay_id]
            session = self._sessions[r.session_id]
            session.remove(r)
            if not session:
                del self._sessions[r.session_id]


class Tx:
    """What one decision changes: the replays to write and the effects to perform."""

    def __init__(self, book: ReplayBook, now: float) -> None:
        self.book = book
        self.config = book.config
        self.now = now
        self.effects: list[Effect] = []
        self._changed: dict[str, ReplayState] = {}
        self.items: dict[Key, QueueItem] = {}  # items changed, written with the decision
        self.new_items: list[QueueItem] = []  # items added (inserted: unique per queue)
        self.new_queues: list[QueueDef] = []
        self._settling = False

    @property
    def changed(self) -> list[ReplayState]:
        """The replays changed so far."""
        return list(self._changed.values())

    def touch_item(self, item: QueueItem) -> None:
        """``item`` changed: written with the decision."""
        item.updated_at = self.now
        self.items[item.key] = item

    def touch(self, r: ReplayState) -> None:
        """``r`` changed: written with the decision."""
        r.updated_at = self.now
        self._changed[r.replay_id] = r

    def event(self, topic: str, **data: object) -> None:
        self.effects.append(PublishEvent(topic, {**data, "at": self.now}))

    def audit(self, kind: str, **data: object) -> None:
        self.effects.append(AuditRecord(kind, {**data, "at": self.now}))

    def done(self, reply: Message) -> Decision:
        """The decision: durable as soon as it changed a replay or has an effect (every
        effect is recorded or performed only after the commit, docs/durability.md)."""
        if self.book.settle is not None and not self._settling:
            self._settling = True
            self.book.settle(self)
        writes = tuple(self._changed[i] for i in sorted(self._changed))
        new = {i.key for i in self.new_items}
        items = tuple(i for k, i in self.items.items() if k not in new)
        return Decision(reply, self.effects, writes,
                        durable=bool(writes or self.effects or items or self.new_items
                                     or self.new_queues),
                        items=items, new_items=tuple(self.new_items),
                        new_queues=tuple(self.new_queues))


def who(r: ReplayState, action_id: str | None = None) -> dict[str, object]:
    """The ids every event and audit record of a replay carries."""
    ids: dict[str, object] = {"replay_id": r.replay_id, "session_id": r.session_id,
                              "machine_id": r.machine_id}
    if action_id is not None:
        ids["action_id"] = action_id
    return ids
