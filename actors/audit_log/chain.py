"""The hash chain, pure: canonical encoding, record hashes, and the walk that verifies them.

A record's hash is ``sha256(prev_hash || content)``: ``prev_hash`` as its 32 raw bytes (the
first record's is 32 zero bytes, :data:`GENESIS`), ``content`` the canonical JSON of every
other field (seq, record_id, source, kind, replay_id, at, stored_at, data, screenshots):
UTF-8, keys sorted, no whitespace, floats as Python's shortest round-trip repr, no NaN.
Anyone can recompute it from an export (one JSON object a line) with a few lines of code.

The walk names the first bad record and why:

- ``altered``: its content (or its stored hash) no longer gives its hash;
- ``removed``: records are missing before it (a seq gap, or its prev_hash is not the hash
  of the record before it);
- ``inserted``: it sits between two records that are chained to each other.

Removing the *last* records, or rewriting the whole tail consistently, leaves a valid
chain: only an anchor kept elsewhere (``seq:hash`` of a record seen earlier) reveals it,
so :func:`verify` checks anchors too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, Literal

from messages.audit import canonical_json as canonical

GENESIS = "0" * 64
Reason = Literal["altered", "removed", "inserted"]
CONTENT_FIELDS = ("seq", "record_id", "source", "kind", "replay_id", "at", "stored_at",
                  "data", "screenshots")


__all__ = ["GENESIS", "Anchor", "Break", "ChainRecord", "Verdict", "canonical", "chain_hash",
           "content_bytes", "seal", "verify"]


def chain_hash(prev_hash: str, content: bytes) -> str:
    """sha256(prev_hash as raw bytes || content), hex."""
    return hashlib.sha256(bytes.fromhex(prev_hash) + content).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainRecord:
    """One record as stored. ``problem`` is set by a reader that found a field unreadable or
    not in canonical form (the record then counts as altered)."""

    seq: int
    record_id: str
    source: str
    kind: str
    replay_id: str | None
    at: float
    stored_at: float
    data: dict[str, Any]
    screenshots: dict[str, str]
    prev_hash: str
    hash: str
    problem: str | None = None

    def content(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in CONTENT_FIELDS}

    def expected_hash(self) -> str | None:
        """The hash its fields give, or None if they cannot be encoded."""
        try:
            return chain_hash(self.prev_hash, canonical(self.content()))
        except (ValueError, TypeError, UnicodeEncodeError):
            return None

    def label(self) -> str:
        return f"seq {self.seq} (record_id {self.record_id})"


def _string(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def content_bytes(*, seq: int, record_id: str, source: str, kind: str, replay_id: str | None,
                  at: float, stored_at: float, data: bytes, screenshots: bytes) -> bytes:
    """``canonical(content)`` put together around ``data`` and ``screenshots`` already in
    canonical JSON: the same bytes without encoding the data again (the append hot path;
    a unit test checks both ways agree). Keys in sorted order; floats as ``repr``."""
    return b"".join((
        f'{{"at":{float(at)!r},"data":'.encode(), data,
        f',"kind":{_string(kind)},"record_id":{_string(record_id)},'
        f'"replay_id":{_string(replay_id)},"screenshots":'.encode(), screenshots,
        f',"seq":{int(seq)},"source":{_string(source)},"stored_at":{float(stored_at)!r}}}'
        .encode()))


def seal(prev_hash: str, content: dict[str, Any]) -> ChainRecord:
    """The record that follows ``prev_hash`` with ``content`` (keys: CONTENT_FIELDS)."""
    digest = chain_hash(prev_hash, canonical(content))
    return ChainRecord(**content, prev_hash=prev_hash, hash=digest)


@dataclass(frozen=True, slots=True)
class Anchor:
    """``seq:hash`` of a record seen earlier (kept outside the database)."""

    seq: int
    hash: str

    @classmethod
    def parse(cls, text: str) -> Anchor:
        seq, sep, digest = text.strip().partition(":")
        if not sep or not seq.isdigit() or len(digest) != 64:
            raise ValueError(f"anchor {text!r}: expected SEQ:SHA256HEX")
        int(digest, 16)
        return cls(int(seq), digest.lower())


@dataclass(frozen=True, slots=True)
class Break:
    """The first bad record: ``seq`` and ``record_id`` name it (record_id None when the
    record itself is gone)."""

    seq: int
    record_id: str | None
    reason: Reason
    detail: str

    def describe(self) -> str:
        who = f"seq {self.seq}" + (f" (record_id {self.record_id})" if self.record_id else "")
        return f"{who}: {self.reason}: {self.detail}"


@dataclass(slots=True)
class Verdict:
    records: int = 0
    first_seq: int | None = None
    head_seq: int = 0
    head_hash: str = GENESIS
    broken: Break | None = None
    anchors_checked: int = 0

    @property
    def intact(self) -> bool:
        return self.broken is None


def _link_break(r: ChainRecord, p: ChainRecord | None, n: ChainRecord | None,
                expected_prev: str, expected_seq: int) -> Break:
    """Why ``r`` is not chained to ``p``, the record before it (``n`` is the one after)."""
    if n is not None and n.prev_hash == expected_prev:
        after = p.label() if p is not None else "the start"
        return Break(r.seq, r.record_id, "inserted",
                     f"it is not chained to {after}, and {n.label()} is")
    if p is not None and r.prev_hash == p.prev_hash:
        return Break(p.seq, p.record_id, "inserted",
                     f"{r.label()} is chained to the record before it")
    if r.seq > expected_seq:
        missing = (f"seq {expected_seq}" if r.seq == expected_seq + 1
                   else f"seq {expected_seq}..{r.seq - 1}")
        return Break(r.seq, r.record_id, "removed", f"{missing} missing before it")
    before = p.label() if p is not None else "the start of the chain"
    return Break(r.seq, r.record_id, "removed",
                 f"its prev_hash is not the hash of {before}: a record before it was "
                 f"removed (and the rest renumbered), or {before} was rewritten")


def _own_break(r: ChainRecord, expected_seq: int) -> Break | None:
    """Whether ``r``'s own fields still give its hash."""
    if r.problem is not None:
        return Break(r.seq, r.record_id, "altered", r.problem)
    if r.expected_hash() != r.hash:
        return Break(r.seq, r.record_id, "altered", "its content does not give its hash")
    if r.seq > expected_seq:
        missing = (f"seq {expected_seq}" if r.seq == expected_seq + 1
                   else f"seq {expected_seq}..{r.seq - 1}")
        return Break(r.seq, r.record_id, "removed",
                     f"{missing} missing before it (and the chain re-sealed around the gap)")
    if r.seq < expected_seq:
        return Break(r.seq, r.record_id, "altered", f"seq {r.seq} out of order")
    return None


def verify(rows: Iterable[ChainRecord], *, start_prev: str = GENESIS, start_seq: int = 1,
           anchors: Iterable[Anchor] = ()) -> Verdict:
    """Walk ``rows`` (in seq order) and stop at the first bad record.

    ``start_prev`` / ``start_seq`` let a segment (an export ``--since``) be checked on its
    own; its first record's link to what came before is then taken on trust.
    """
    wanted = {a.seq: a for a in anchors}
    verdict = Verdict()
    expected_prev, expected_seq = start_prev, start_seq
    it = iter(rows)
    p: ChainRecord | None = None
    r = next(it, None)
    while r is not None:
        n = next(it, None)
        if verdict.first_seq is None:
            verdict.first_seq = r.seq
        broken = (_link_break(r, p, n, expected_prev, expected_seq)
                  if r.prev_hash != expected_prev else _own_break(r, expected_seq))
        if broken is None and (anchor := wanted.pop(r.seq, None)) is not None:
            verdict.anchors_checked += 1
            if anchor.hash != r.hash:
                broken = Break(r.seq, r.record_id, "altered",
                               f"its hash is not {anchor.hash}, the anchor kept for it")
        if broken is not None:
            verdict.broken = broken
            return verdict
        verdict.records += 1
        verdict.head_seq, verdict.head_hash = r.seq, r.hash
        expected_prev, expected_seq = r.hash, r.seq + 1
        p, r = r, n
    beyond = sorted(a.seq for a in wanted.values() if a.seq > verdict.head_seq)
    if beyond:
        verdict.broken = Break(verdict.head_seq + 1, None, "removed",
                               f"the trail ends at seq {verdict.head_seq} but seq {beyond[-1]}"
                               " was seen before: the records after it were removed")
    return verdict
