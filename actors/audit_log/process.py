"""The audit_log actor process: append records durably, answer queries, prune screenshots.

Only the request API: the bus is lossy, so nothing is recorded from it. A sender keeps each
record until it is named in a :class:`RecordsAcked`, sent once the commit is fsync'ed.
A request is checked whole before anything is written (nothing half-applied), and all its
records are stored in one transaction: one fsync per request, so senders batch. (No group
commit across requests: in MDP/0.2 the broker gives a worker its next request only once
it has answered the last one, so requests never arrive together.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

from loguru import logger

from actors.audit_log.chain import ChainRecord
from actors.audit_log.image_seal import ImageUndecryptable, KeyUnavailable
from actors.audit_log.screenshots import digest_of
from actors.audit_log.store.audit_store import AuditStore
from actors.audit_log.store.open import open_store
from actors.base import Actor, Incoming, caller_of
from actors.store_exits import exit_on_loss, open_or_exit
from messages import events
from messages.audit import (
    DATA_VIEWED,
    RESERVED_SOURCE,
    VIEW_SOURCE,
    AppendProblem,
    AppendRecords,
    AuditHead,
    AuditPage,
    AuditQuery,
    AuditRecordIn,
    AuditRecordOut,
    GetAuditHead,
    GetScreenshot,
    PruneScreenshots,
    RecordsAcked,
    RecordView,
    Screenshot,
    ScreenshotsPruned,
    canonical_json,
    encode_append,
)
from messages.base import Message
from messages.control import ErrorReply
from runtime.rate_limit import RateLimit
from runtime.settings import Settings

REFUSALS_PER_S = 5.0


class AuditLogActor(Actor):
    """Keeps the append-only, hash-chained audit trail."""

    service = "audit_log"
    # Records in another actor's name come from the tree only; retention deletes images.
    control_requests: ClassVar[frozenset[type[Message]]] = frozenset(
        {PruneScreenshots, RecordView})
    tree_requests: ClassVar[frozenset[type[Message]]] = frozenset({AppendRecords})

    def __init__(self, settings: Settings) -> None:
        # Before the sockets: a database out of reach ends the process here.
        self.store = _open_store(settings)
        self._sealing_key = self.store.cipher.current
        """The key new images are sealed with, to record when it changes."""
        super().__init__(settings)
        self._recorded = RateLimit(REFUSALS_PER_S)
        self.handle(AppendRecords, self.on_append)
        self.handle(AuditQuery, self.on_query)
        self.handle(GetAuditHead, self.on_head)
        self.handle(PruneScreenshots, self.on_prune)
        self.handle(RecordView, self.on_record_view)
        self.handle(GetScreenshot, self.on_get_screenshot)
        self.every(1.0, self._tick)

    def on_start(self) -> None:
        seq, digest, _at = self.store.head()
        logger.info("audit_log: {} at seq {} ({}); images sealed with key {} of {}",
                    self.store.where, seq, digest[:16], self.store.cipher.current,
                    self.store.cipher.path)
        self._key_problem(self.store.cipher.problem)

    def _tick(self, _now: float) -> None:
        self.store.flush_anchor()
        cipher = self.store.cipher
        if not cipher.refresh():
            return
        if cipher.problem is not None:
            self._key_problem(cipher.problem)
            return
        before, self._sealing_key = self._sealing_key, cipher.current
        if before is not None and cipher.current != before and cipher.current is not None:
            seq = self.store.record_key_rotation(before, cipher.current, time.time())
            logger.info("audit_log: new images sealed with key {} (was {}; seq {})",
                        cipher.current, before, seq)
        else:
            logger.info("audit_log: the image keyring {} is usable (key {})", cipher.path,
                        cipher.current)

    def _key_problem(self, problem: str | None, record_id: str | None = None) -> None:
        if problem is None:
            return
        logger.error("audit_log: {}: screenshots are neither stored nor served until it is "
                     "put right (docs/operations.md, \"Screenshots encrypted at rest\")", problem)
        self.publish(events.IMAGE_KEY_UNAVAILABLE, reason=problem[:500],
                     keyring=str(self.store.cipher.path),
                     **({"record_id": record_id} if record_id else {}))

    def on_stop(self) -> None:
        self.store.close()

    def on_append(self, msg: AppendRecords, _req: Incoming) -> Message:
        encoded = encode_append(msg)
        if isinstance(encoded, AppendProblem):
            self.publish(events.BAD_MESSAGE, service=self.service, reason=encoded.code,
                         detail=encoded.message[:500], record_id=encoded.record_id)
            return ErrorReply(code=encoded.code, message=encoded.message,
                              detail=encoded.model_dump(exclude={"code", "message"}))
        try:
            result = self.store.append(msg.records, encoded, time.time())
        except KeyUnavailable as exc:  # nothing was written: the sender keeps the records
            self._key_problem(str(exc), msg.records[0].record_id)
            return ErrorReply(code=exc.code, message=str(exc)[:500])
        except Exception as exc:  # disk full, I/O error: nothing was committed
            logger.exception("audit_log: storing {} records failed", len(msg.records))
            return ErrorReply(code="storage_failed", message=repr(exc)[:500])
        conflicting = result.ids(msg.records, "conflicting")
        if conflicting:
            logger.warning("audit_log: re-sent with another content (first kept): {}",
                           conflicting)
            self.publish(events.AUDIT_RECORD_CONFLICT, record_ids=conflicting[:50])
        # A conflicting record is not stored: its id is not acknowledged, and the sender,
        # told so, keeps it (audit_outbox/sender.py sends it again under another id).
        refused = set(conflicting)
        return RecordsAcked(record_ids=[r.record_id for r in msg.records
                                        if r.record_id not in refused],
                            duplicates=result.ids(msg.records, "duplicate"),
                            conflicting=conflicting)

    def on_record_view(self, msg: RecordView, req: Incoming) -> Message:
        """A command's view, written as a ``data_viewed`` record under the proven OS user.
        Not filed under the replay (its timeline is the story of the run)."""
        data: dict[str, Any] = {"os_user": msg.os_user, "host": msg.host, "what": msg.what}
        if msg.replay_id is not None:
            data["replay_id"] = msg.replay_id
        data.update({k: v for k, v in (("since", msg.since), ("queue", msg.queue),
                                       ("reference", msg.reference)) if v is not None})
        record = AuditRecordIn(record_id=msg.record_id, source=VIEW_SOURCE, kind=DATA_VIEWED,
                               replay_id=None, at=time.time(), data=data)
        return self.on_append(AppendRecords(records=[record]), req)

    # Queries and retention -------------------------------------------------------------------

    def on_query(self, msg: AuditQuery, _req: Incoming) -> Message:
        rows, next_seq = self.store.page(after_seq=msg.after_seq, limit=msg.limit,
                                         replay_id=msg.replay_id, since=msg.since,
                                         kind=msg.kind)
        states = self.store.screenshot_state({d for r in rows for d in r.screenshots.values()})
        return AuditPage(records=[_out(r, states) for r in rows], next_seq=next_seq)

    def on_head(self, _msg: GetAuditHead, _req: Incoming) -> Message:
        seq, digest, _at = self.store.head()
        return AuditHead(seq=seq, hash=digest, records=self.store.count())

    def on_get_screenshot(self, msg: GetScreenshot, _req: Incoming) -> Message:
        """One image by hash, checked against its name (for the supervisor console)."""
        try:
            image = self.store.files.read(msg.sha256)
        except FileNotFoundError:
            state = self.store.screenshot_state({msg.sha256})[msg.sha256]
            return ErrorReply(code="screenshot_not_found", message=(
                f"no image {msg.sha256[:16]}… ({state})"),
                detail={"sha256": msg.sha256, "state": state})
        except KeyUnavailable as exc:
            self._key_problem(str(exc))
            return ErrorReply(code=exc.code, message=str(exc)[:500],
                              detail={"sha256": msg.sha256})
        except ImageUndecryptable:
            image = b""  # answered as corrupt below
        if digest_of(image) != msg.sha256:
            logger.error("audit_log: image file {} does not match its hash", msg.sha256)
            return ErrorReply(code="screenshot_corrupt", message=(
                f"the file of {msg.sha256[:16]}… no longer has that hash"),
                detail={"sha256": msg.sha256})
        return Screenshot(sha256=msg.sha256, data=image)

    def on_prune(self, msg: PruneScreenshots, _req: Incoming) -> Message:
        done = self.store.prune_screenshots(msg.older_than_days, msg.operator, time.time(),
                                            msg.os_user)
        logger.info("audit_log: pruned {} screenshot files ({} bytes) last used before {}",
                    done.files_removed, done.bytes_freed, done.cutoff)
        return ScreenshotsPruned(files_removed=done.files_removed, bytes_freed=done.bytes_freed,
                                 cutoff=done.cutoff, seq=done.seq, more=done.more)


    def refuse_sender(self, msg: Message, req: Incoming, code: str, text: str) -> Message:
        """As every actor does, and a record of the refusal in the trail (at most
        REFUSALS_PER_S: a hostile peer must not fill it; the next one counts those left
        out, ``suppressed``)."""
        reply = super().refuse_sender(msg, req, code, text)
        if not self._recorded.allow(time.monotonic()):
            return reply
        data: dict[str, Any] = {"type": msg.type_name, "code": code, "message": text,
                                "identity": req.identity, **caller_of(req)}
        if self._recorded.dropped:
            data["suppressed"], self._recorded.dropped = self._recorded.dropped, 0
        record = AuditRecordIn(record_id=f"{RESERVED_SOURCE}:refused:{uuid.uuid4().hex}",
                               source=RESERVED_SOURCE, kind="request_refused", at=time.time(),
                               data=data)
        try:
            self.store.append([record], [canonical_json(record.data)], record.at)
        except Exception:  # the refusal stands; the event and the log line say it
            logger.exception("audit_log: could not record a refused request")
        return reply


def _out(r: ChainRecord, states: Mapping[str, str]) -> AuditRecordOut:
    fields: dict[str, Any] = {
        "seq": r.seq, "record_id": r.record_id, "source": r.source, "kind": r.kind,
        "replay_id": r.replay_id, "at": r.at, "stored_at": r.stored_at, "data": r.data,
        "screenshots": r.screenshots,
        "screenshot_state": {name: states[d] for name, d in r.screenshots.items()},
        "prev_hash": r.prev_hash, "hash": r.hash}
    return AuditRecordOut.model_validate(fields)


def _open_store(settings: Settings) -> AuditStore:
    """The trail the settings name (store/open.py); a database out of reach ends the process
    (actors/store_exits.py). A connection lost mid-request stops it at once: nothing of that
    request is acknowledged (its COMMIT's outcome may be unknown); restarted, the actor
    reconnects, and the sender's re-send is stored or found stored (once)."""
    if not settings.database_url:
        return open_store(settings)
    from runtime.pg import DatabaseUnavailable  # psycopg: only where PostgreSQL is used

    return open_or_exit("audit_log", lambda: open_store(settings, exit_on_loss("audit_log")),
                        DatabaseUnavailable)
