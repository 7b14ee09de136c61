"""``run.py audit show|verify|export|prune|keys``: read, check and trim the audit trail.

Where each command gets its data, and why:

- ``show``, ``export`` and ``prune`` ask the audit_log actor through the broker
  (``audit.query`` / ``audit.prune_screenshots``): the actor owns its database
  (docs/architecture.md), the commands then work from any machine that reaches the broker, and a
  prune (a write) has a single writer.
- ``verify`` reads the database itself (the file, or PostgreSQL with
  ``LEA_DATABASE_URL``), read-only, in one read transaction (a consistent snapshot while the
  actor keeps appending). It is the auditor's offline tool: it must work with the tree
  stopped, on a copy of the data directory (or a restored dump), and must not take the word
  of the very process whose output it checks. It writes nothing, so the actors remain the
  only writers.
  ``verify --jsonl FILE`` checks an export instead, with nothing but that file. It opens
  each screenshot with the image keyring (``LEA_IMAGE_KEYRING``) to check that it gives its
  hash; without the keyring it checks nothing of them unless told ``--no-images``.
- ``keys list|rotate`` read and extend the image keyring file itself (image_keys.py); the
  audit_log actor notices a rotation within a second.

Exit codes: 0 fine; 1 the trail is broken (verify) or nothing was found (show); 2 the
trail or the actor could not be reached, or an argument is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from actors.audit_log.chain import Anchor, ChainRecord, Verdict, verify
from actors.audit_log.evidence import Evidence, FileState
from actors.audit_log.image_keys import read_keyring, rotate
from actors.audit_log.image_seal import KeyUnavailable
from actors.audit_log.store.audit_store import iter_chain, read_anchor
from actors.audit_log.store.open import keyring_path, open_reader
from cli import audit_access
from cli.audit_timeline import describe_record, record_json
from cli.brokers import said_passive
from messages.audit import AuditPage, AuditQuery, AuditRecordOut, PruneScreenshots
from messages.audit import ScreenshotsPruned as Pruned
from runtime.settings import Settings
from transport.client import CallFailed, SyncClient

EXIT_OK, EXIT_BROKEN, EXIT_UNREACHABLE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="audit_command", required=True)
    show = sub.add_parser("show", help="the timeline of one replay (or of one source: "
                          "--source console for sign-ins and accounts)")
    show.add_argument("replay_id", nargs="?", help="the replay (or give --source)")
    show.add_argument("--source", help="instead of a replay: every record of this source "
                      "(console, supervisor, dispatcher...)")
    show.add_argument("--json", action="store_true", help="one JSON object per record")
    check = sub.add_parser("verify", help="walk the hash chain (reads the database file)")
    check.add_argument("--anchor", action="append", default=[], metavar="SEQ:HASH",
                       help="a seq:hash noted earlier that must still be in the chain")
    check.add_argument("--no-images", action="store_true",
                       help="only check that image files exist, not their content")
    check.add_argument("--jsonl", type=Path, metavar="FILE",
                       help="verify an export file instead of the database")
    export = sub.add_parser("export", help="records as JSON lines on stdout")
    export.add_argument("--since", help="stored at or after: ISO 8601 or epoch seconds")
    prune = sub.add_parser("prune", help="retention: remove old screenshot files "
                           "(their hashes stay; the chain still verifies)")
    prune.add_argument("--prune-screenshots-older-than", "--screenshots-older-than",
                       dest="days", type=float, required=True, metavar="DAYS",
                       help="remove the image files no record newer than DAYS refers to")
    prune.add_argument("--operator", help="who prunes (recorded in the trail)")
    for p in (show, export, prune):
        p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait per try")
    audit_access.add_arguments(sub)
    keys = sub.add_parser("keys", help="the screenshots' image keyring (LEA_IMAGE_KEYRING)")
    keys.add_argument("keys_command", choices=("list", "rotate"),
                      help="list: its keys; rotate: add a key for the images to come (the "
                      "old keys stay, to read the images sealed with them)")


def run(settings: Settings, args: argparse.Namespace) -> int:
    if args.audit_command == "verify":
        return verify_command(settings, args)
    if args.audit_command == "keys":
        return _keys(settings, args.keys_command)
    if said_passive(settings):
        return EXIT_UNREACHABLE
    # The people's door: the server knows this process's OS account (docs/operations.md,
    # "Who may change replays").
    client = SyncClient(settings.control_mdp_endpoint)
    try:
        if args.audit_command == "show":
            return _show(client, args)
        if args.audit_command == "export":
            return _export(client, args)
        if args.audit_command == "access":
            return audit_access.access_command(lambda q: pages(client, q, args.timeout), args)
        return _prune(client, args)
    except CallFailed as exc:
        hint = (f"; is the tree running (broker at {settings.control_mdp_endpoint})?"
                if exc.code == "timeout" else "")
        print(f"error: audit_log: {exc.message} ({exc.code}){hint}", file=sys.stderr)
        return EXIT_UNREACHABLE
    finally:
        client.close()


# Through the actor ----------------------------------------------------------------------

def pages(client: SyncClient, query: AuditQuery, timeout_s: float) -> Iterator[AuditRecordOut]:
    """Every record matching ``query``, page after page."""
    while True:
        reply = client.call("audit_log", query, timeout_s=timeout_s).body
        if not isinstance(reply, AuditPage):
            raise CallFailed("unexpected_reply", f"got {reply.type_name}")
        yield from reply.records
        if reply.next_seq is None:
            return
        query = query.model_copy(update={"after_seq": reply.next_seq})


def _show(client: SyncClient, args: argparse.Namespace) -> int:
    if (args.replay_id is None) == (args.source is None):
        print("error: audit show: give a replay id or --source, one of them",
              file=sys.stderr)
        return EXIT_UNREACHABLE
    count = 0
    what = f"replay {args.replay_id}" if args.replay_id else f"source {args.source}"
    if args.replay_id:  # a replay's records hold what was typed and seen: the view is recorded
        audit_access.record_view(client, "timeline", args.timeout, replay_id=args.replay_id)
    for record in pages(client, AuditQuery(replay_id=args.replay_id), args.timeout):
        if args.source is not None and record.source != args.source:
            continue
        if count == 0 and not args.json:
            print(f"{what}  (times in UTC)")
        print(json.dumps(record_json(record), ensure_ascii=False) if args.json
              else describe_record(record))
        count += 1
    if count == 0:
        print(f"no audit record for {what}", file=sys.stderr)
        return EXIT_BROKEN
    if not args.json:
        print(f"{count} records")
    return EXIT_OK


def parse_since(text: str) -> float:
    """Epoch seconds from ``1767225600[.5]`` or ISO 8601 (no zone: local time)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since {text!r}: expected ISO 8601 or epoch seconds") from None
    return (when if when.tzinfo else when.astimezone()).timestamp()


def _export(client: SyncClient, args: argparse.Namespace) -> int:
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    audit_access.record_view(client, "export", args.timeout, since=since)
    count = 0
    try:
        for record in pages(client, AuditQuery(since=since), args.timeout):
            sys.stdout.write(json.dumps(record_json(record), ensure_ascii=False) + "\n")
            count += 1
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has had enough
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - no flush error at exit
        return EXIT_BROKEN
    print(f"exported {count} records", file=sys.stderr)
    return EXIT_OK


def _prune(client: SyncClient, args: argparse.Namespace) -> int:
    if args.days < 0:
        print("error: DAYS must be 0 or more", file=sys.stderr)
        return EXIT_UNREACHABLE
    files = freed = 0
    seqs: list[int] = []
    while True:  # the actor prunes a bounded batch per request
        reply = client.call("audit_log", PruneScreenshots(older_than_days=args.days,
                                                          operator=args.operator),
                            timeout_s=max(args.timeout, 30.0), retries=0).body
        if not isinstance(reply, Pruned):
            raise CallFailed("unexpected_reply", f"got {reply.type_name}")
        files, freed = files + reply.files_removed, freed + reply.bytes_freed
        seqs += [reply.seq] if reply.seq is not None else []
        if not reply.more:
            break
    cutoff = datetime.fromtimestamp(reply.cutoff, UTC).isoformat(timespec="seconds")
    print(f"removed {files} screenshot files ({freed} bytes) last referenced before {cutoff}"
          + (f"; recorded as seq {', '.join(map(str, seqs))}" if seqs else ""))
    return EXIT_OK


def _keys(settings: Settings, command: str) -> int:
    path = keyring_path(settings)
    try:
        ring = rotate(path, time.time()) if command == "rotate" else read_keyring(path)
    except (KeyUnavailable, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    for key_id in sorted(ring.keys, key=ring.created_at.__getitem__):
        made = datetime.fromtimestamp(ring.created_at[key_id], UTC).isoformat(timespec="seconds")
        mark = "  (current: new images)" if key_id == ring.current else ""
        print(f"{key_id}  created {made}{mark}")
    if command == "rotate":
        print(f"new images are sealed with {ring.current} once audit_log has read {path} "
              "(within a second); keep a copy of this file with the backups of the trail, "
              "apart from them")
    return EXIT_OK


# Verification (offline) -----------------------------------------------------------------

def _jsonl_records(path: Path) -> Iterator[ChainRecord]:
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                yield record_from_json(line, number)


def record_from_json(line: str, number: int) -> ChainRecord:
    """One export line as the chain sees it (a malformed line counts as altered)."""
    try:
        obj: dict[str, Any] = json.loads(line)
        return ChainRecord(
            int(obj["seq"]), str(obj["record_id"]), str(obj["source"]), str(obj["kind"]),
            obj["replay_id"], float(obj["at"]), float(obj["stored_at"]), dict(obj["data"]),
            dict(obj["screenshots"]), str(obj["prev_hash"]), str(obj["hash"]))
    except (ValueError, KeyError, TypeError) as exc:
        return ChainRecord(number, f"(line {number})", "", "", None, 0.0, 0.0, {}, {}, "", "",
                           problem=f"line {number} is not an exported record: {exc}")


def _verify_jsonl(path: Path, anchors: list[Anchor]) -> tuple[Verdict, ChainRecord | None]:
    first = next(_jsonl_records(path), None)
    if first is None:
        return Verdict(), None
    return verify(_jsonl_records(path), start_prev=first.prev_hash, start_seq=first.seq,
                  anchors=anchors), first


def verify_command(settings: Settings, args: argparse.Namespace) -> int:
    try:
        anchors = [Anchor.parse(text) for text in args.anchor]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.jsonl is not None:
        try:
            verdict, first = _verify_jsonl(args.jsonl, anchors)
        except OSError as exc:
            print(f"error: cannot read {args.jsonl}: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        note = ""
        if first is not None and first.seq > 1:
            note = (f"a segment: its link to seq {first.seq - 1} is taken on trust; check it "
                    f"against the trail with: audit verify --anchor {first.seq - 1}:"
                    f"{first.prev_hash}")
        return _report(verdict, [], f"export {args.jsonl}", note)
    try:
        db = open_reader(settings)
    except FileNotFoundError as exc:
        print(f"error: no audit database: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except OSError as exc:  # unreadable, or PostgreSQL out of reach (DatabaseUnavailable)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    evidence = Evidence()
    problems: list[str] = []
    note = ""
    try:
        # The anchor before the snapshot: it can only be behind it.
        saved = read_anchor(settings.data_dir / "audit" / db.anchor_name)
        with db.snapshot():  # one consistent state, the images included
            verdict = verify(_feeding(iter_chain(db), evidence),
                             anchors=[*anchors, *([saved] if saved else [])])
            locked = db.images.cipher.problem if not args.no_images else None
            if verdict.intact and evidence.last_ref and locked is not None:
                print(f"error: the screenshots cannot be checked: {locked}; give the image "
                      "keyring (LEA_IMAGE_KEYRING), or check their presence alone with "
                      "--no-images", file=sys.stderr)
                return EXIT_UNREACHABLE
            if verdict.intact:
                states: dict[str, FileState] = {
                    d: db.images.state(d, check_content=not args.no_images)
                    for d in evidence.last_ref}
                problems = [p.describe() for p in evidence.problems(states)]
                pruned = sum(1 for d, s in states.items()
                             if s == "missing" and evidence.pruned(d))
                note = (f"screenshots: {len(states) - pruned} files checked, {pruned} pruned "
                        "by retention")
    finally:
        db.close()
    return _report(verdict, problems, db.where, note)


def _feeding(rows: Iterator[ChainRecord], evidence: Evidence) -> Iterator[ChainRecord]:
    for row in rows:
        evidence.add(row)
        yield row


def _report(verdict: Verdict, problems: list[str], where: str, note: str = "") -> int:
    if verdict.broken is not None:
        print(f"audit trail BROKEN ({where}): first bad record {verdict.broken.describe()}")
        print(f"  ({verdict.records} records verified before it)")
        return EXIT_BROKEN
    span = (f"seq {verdict.first_seq}..{verdict.head_seq}" if verdict.records else "empty")
    print(f"audit trail intact ({where}): {verdict.records} records ({span}), "
          f"{verdict.anchors_checked} anchors checked")
    print(f"head {verdict.head_seq}:{verdict.head_hash}  (keep it: --anchor checks it later)")
    if note:
        print(note)
    for problem in problems:
        print(f"screenshot problem: {problem}")
    return EXIT_BROKEN if problems else EXIT_OK
