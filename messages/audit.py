"""Audit conversation: any sender ↔ audit_log (append records durably, read them back).

A sender keeps each record (in its outbox) until :class:`RecordsAcked` names its
``record_id``, and re-sends it after a timeout or a restart of either side: audit_log stores
a ``record_id`` once and acknowledges every copy. :func:`check_append` is the receiver's
check, exported so that a sender can refuse a bad record before it reaches its outbox (a
record refused here is refused every time: re-sending it cannot help).
"""

from __future__ import annotations

import json
import math
from typing import Any, Final, Literal

from pydantic import Field, StrictBytes, StrictFloat

from messages.base import Message

MAX_RECORDS_PER_APPEND: Final = 1000
MAX_SCREENSHOTS_PER_RECORD: Final = 8
MAX_SCREENSHOT_BYTES: Final = 8 * 1024 * 1024
MAX_DATA_BYTES: Final = 256 * 1024
"""Size of a record's ``data`` as canonical JSON (LLM prompts and answers fit)."""
MAX_PAGE_RECORDS: Final = 1000
MAX_REPLAY_ID: Final = 128
DATA_VIEWED: Final = "data_viewed"
"""The kind of the record of a person's view of a patient's data (a screenshot, a replay's
timeline or typed values): who (``account``/``role``/``via`` at the console, ``os_user``
for a command), ``what``, and the replay or image (docs/operations.md, "Who saw what")."""
RESERVED_SOURCE: Final = "audit_log"
"""Records of this source are written by audit_log itself (e.g. ``screenshots_pruned``)."""
VIEW_SOURCE: Final = "cli"
"""The source of the views the command line records (:class:`RecordView`)."""

_ID = r"^[A-Za-z0-9._:@/+=-]+$"
_NAME = r"^[a-z][a-z0-9_.-]*$"

ScreenshotState = Literal["stored", "pruned", "missing"]


class AuditRecordIn(Message):
    """One event for the audit trail, as its sender built it."""

    record_id: str = Field(min_length=1, max_length=200, pattern=_ID)
    """Globally unique, chosen by the sender; the idempotency key."""
    source: str = Field(min_length=1, max_length=64, pattern=_NAME)
    kind: str = Field(min_length=1, max_length=64, pattern=_NAME)
    replay_id: str | None = Field(None, min_length=1, max_length=MAX_REPLAY_ID)
    at: StrictFloat
    """When it happened, epoch seconds, by the sender's clock."""
    data: dict[str, Any] = Field(default_factory=dict)
    """JSON-compatible (no bytes, no NaN): images go in ``screenshots``."""
    screenshots: dict[str, StrictBytes] = Field(default_factory=dict)
    """Name (``before``, ``after`` ...) → image bytes; stored once by sha256."""


class AppendRecords(Message, type_name="audit.append"):
    """Append records; answered by :class:`RecordsAcked` once every one is durable."""

    records: list[AuditRecordIn]


class RecordView(Message, type_name="audit.record_view"):
    """A person's view of patient data from the command line (``audit show``, ``audit
    export``), recorded before anything is shown (docs/operations.md, "Who saw what").
    Taken at the people's door only: audit_log writes it under the OS user the door proved,
    so nobody records a view in another's name. Answered by :class:`RecordsAcked`."""

    record_id: str = Field(min_length=1, max_length=200)
    """Chosen by the caller: a retried request is stored once."""
    what: str = Field(min_length=1, max_length=64)
    host: str | None = Field(None, max_length=255)
    replay_id: str | None = Field(None, max_length=200)
    since: float | None = None
    queue: str | None = Field(None, max_length=200)
    reference: str | None = Field(None, max_length=200)
    """A work item's (``queue item``), or None for a whole queue (``queue export``)."""
    os_user: str | None = Field(None, max_length=128)
    """Filled by audit_log from the people's door (actors/callers.py), never trusted."""


class RecordsAcked(Message, type_name="audit.acked"):
    """The records named in ``record_ids`` are durably stored (now or before); those in
    ``conflicting`` are not."""

    record_ids: list[str]
    """The request's record ids that are stored: new, or already present with the same
    content. Not the conflicting ones."""
    duplicates: list[str] = Field(default_factory=list)
    """Already present before this request (a re-send): not stored again."""
    conflicting: list[str] = Field(default_factory=list)
    """Already present with a *different* content: NOT stored (the first one is kept, and
    the attempt is itself recorded in the trail, kind ``record_conflict``). The sender must
    keep such a record and send it under another id (docs/durability.md)."""
    durable: Literal[True] = True


class AuditQuery(Message, type_name="audit.query"):
    """Records in chain order with ``seq > after_seq``, optionally of one replay / since a time."""

    replay_id: str | None = Field(None, max_length=128)
    since: float | None = None
    """Only records *stored* at or after this epoch time (``stored_at``, which never goes
    backwards: the answer is a suffix of the chain, docs/durability.md), not by their ``at``,
    which is the sender's clock."""
    kind: str | None = Field(None, max_length=64)
    """Only records of this kind (e.g. :data:`DATA_VIEWED`: who saw what)."""
    after_seq: int = Field(0, ge=0)
    limit: int = Field(500, ge=1, le=MAX_PAGE_RECORDS)


class AuditRecordOut(Message):
    """A stored record, with its place in the chain."""

    seq: int
    record_id: str
    source: str
    kind: str
    replay_id: str | None
    at: float
    stored_at: float
    data: dict[str, Any]
    screenshots: dict[str, str]
    """Name → sha256 hex (what the chain hashes)."""
    screenshot_state: dict[str, ScreenshotState] = Field(default_factory=dict)
    """Name → whether its image file is still there (``pruned`` by retention)."""
    prev_hash: str
    hash: str


class AuditPage(Message, type_name="audit.page"):
    records: list[AuditRecordOut]
    next_seq: int | None
    """Pass as ``after_seq`` for the next page; None when there is no more."""


class GetAuditHead(Message, type_name="audit.head"):
    """The last record of the chain (an anchor to keep elsewhere)."""


class AuditHead(Message, type_name="audit.head_reply"):
    seq: int
    hash: str
    records: int


class PruneScreenshots(Message, type_name="audit.prune_screenshots"):
    """Retention: remove the image files not referenced for ``older_than_days``; their hashes
    stay in the records, the chain still verifies, and the prune is itself a record."""

    older_than_days: float = Field(ge=0, le=100_000)
    operator: str | None = Field(None, max_length=128)
    os_user: str | None = Field(None, max_length=128)
    """Filled by audit_log from the people's door (actors/callers.py), never trusted."""


class ScreenshotsPruned(Message, type_name="audit.screenshots_pruned"):
    files_removed: int
    bytes_freed: int
    cutoff: float
    seq: int | None
    """The ``screenshots_pruned`` record, or None when nothing was old enough."""
    more: bool = False
    """Only part of them this time (a bounded batch): send the request again."""


class GetScreenshot(Message, type_name="audit.get_screenshot"):
    """The image a record names by hash (:attr:`AuditRecordOut.screenshots`): answered by
    :class:`Screenshot`, or an ErrorReply ``screenshot_not_found`` (detail ``state``:
    ``pruned`` by retention, or ``missing``) or ``screenshot_corrupt`` (the file on disk no
    longer has that hash)."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Screenshot(Message, type_name="audit.screenshot"):
    sha256: str
    data: StrictBytes
    """The image as its sender stored it (PNG or JPEG), at most MAX_SCREENSHOT_BYTES."""


class AppendProblem(Message):
    """Why an append is refused: ``code`` is stable (see :func:`check_append`)."""

    code: Literal["too_many_records", "too_many_screenshots", "screenshot_too_large",
                  "data_too_large", "invalid_data", "reserved_source", "empty_append"]
    message: str
    index: int | None = None
    record_id: str | None = None


def json_problem(value: Any, path: str = "data") -> str | None:
    """Where ``value`` is not plain JSON (str keys; str, int, finite float, bool, None,
    list, dict), or None."""
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path}: {value!r} is not a finite number"
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            if (found := json_problem(item, f"{path}.{i}")) is not None:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}: key {key!r} is not a string"
            if (found := json_problem(item, f"{path}.{key}")) is not None:
                return found
        return None
    if isinstance(value, bytes | bytearray):
        return f"{path}: bytes are not allowed in data; send images in 'screenshots'"
    return f"{path}: {type(value).__name__} is not JSON"


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)
"""What ``json.dumps`` with these options builds at each call (the same class, the same
options, so the same bytes: a unit test checks), built once: both sides encode every record."""


def canonical_json(value: Any) -> bytes:
    """The one byte string of a JSON value: UTF-8, keys sorted, no whitespace, no NaN
    (ValueError / TypeError if it is not JSON). The audit chain hashes this form."""
    return _CANONICAL.encode(value).encode("utf-8")


def encode_record(record: AuditRecordIn) -> bytes | AppendProblem:
    """``record.data`` in canonical JSON, or the first reason the record cannot be stored."""
    def problem(code: Any, message: str) -> AppendProblem:
        return AppendProblem(code=code, message=message, record_id=record.record_id)

    if record.source == RESERVED_SOURCE:
        return problem("reserved_source", f"source {RESERVED_SOURCE!r} is audit_log's own")
    if not math.isfinite(record.at):
        return problem("invalid_data", f"at: {record.at!r} is not a finite time")
    if "\x00" in (record.replay_id or ""):  # PostgreSQL text cannot hold it: refused on both
        return problem("invalid_data", "replay_id contains a NUL character")
    try:
        (record.replay_id or "").encode("utf-8")
        data = canonical_json(record.data)
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        return problem("invalid_data", json_problem(record.data) or f"data: {exc}")
    if len(data) > MAX_DATA_BYTES:
        return problem("data_too_large", f"data is {len(data)} bytes as JSON, over "
                       f"{MAX_DATA_BYTES}")
    if len(record.screenshots) > MAX_SCREENSHOTS_PER_RECORD:
        return problem("too_many_screenshots", f"{len(record.screenshots)} screenshots, "
                       f"over {MAX_SCREENSHOTS_PER_RECORD}")
    for name, image in record.screenshots.items():
        if not 1 <= len(name) <= 64:
            return problem("invalid_data", f"screenshot name {name[:80]!r}: 1 to 64 chars")
        if len(image) > MAX_SCREENSHOT_BYTES:
            return problem("screenshot_too_large", f"screenshot {name!r} is {len(image)} bytes, "
                           f"over {MAX_SCREENSHOT_BYTES}")
    return data


def encode_append(msg: AppendRecords) -> list[bytes] | AppendProblem:
    """Each record's data in canonical JSON, or the first reason the whole request is
    refused (then nothing of it is stored)."""
    if not msg.records:
        return AppendProblem(code="empty_append", message="no records")
    if len(msg.records) > MAX_RECORDS_PER_APPEND:
        return AppendProblem(code="too_many_records", message=(
            f"{len(msg.records)} records, over {MAX_RECORDS_PER_APPEND} per request"))
    encoded = []
    for index, record in enumerate(msg.records):
        found = encode_record(record)
        if isinstance(found, AppendProblem):
            return found.model_copy(update={"index": index})
        encoded.append(found)
    return encoded


def check_append(msg: AppendRecords) -> AppendProblem | None:
    """Why audit_log would refuse ``msg`` (a sender checks before keeping it), or None."""
    found = encode_append(msg)
    return found if isinstance(found, AppendProblem) else None
