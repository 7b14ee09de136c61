"""Who saw a patient's data: ``audit show`` and ``audit export`` record their own view before
they print anything, and ``audit access --person X | --replay R`` lists the views
(docs/operations.md, "Who saw what").

A command's view is a ``data_viewed`` record of source ``cli`` naming the OS user that ran it
(as the OS tells this process), the host and what was read; it is appended through audit_log
and acknowledged (durable) before anything is shown: if it cannot be, nothing is.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from messages.audit import (
    DATA_VIEWED,
    VIEW_SOURCE,
    AuditQuery,
    AuditRecordOut,
    RecordsAcked,
    RecordView,
)
from transport.client import CallFailed, SyncClient

Pages = Callable[[AuditQuery], Iterator[AuditRecordOut]]


def add_arguments(sub: Any) -> None:
    access = sub.add_parser("access", help="who saw a patient's data: the views recorded, of "
                            "one person or of one replay")
    which = access.add_mutually_exclusive_group(required=True)
    which.add_argument("--person", help="an account of the console, or an OS user (commands)")
    which.add_argument("--replay", help="a replay (its timeline, its screenshots)")
    which.add_argument("--item", metavar="QUEUE/REFERENCE",
                       help="a work item (its inputs and outputs, and its queue's exports)")
    access.add_argument("--json", action="store_true", help="one JSON object per view")
    access.add_argument("--timeout", type=float, default=5.0, help="seconds to wait per try")


def record_view(client: SyncClient, what: str, timeout_s: float, *,
                replay_id: str | None = None, since: float | None = None,
                queue: str | None = None, reference: str | None = None) -> None:
    """Have this command's view recorded and wait for audit_log's acknowledgment
    (CallFailed otherwise: the caller then shows nothing). audit_log writes it under the OS
    user the people's door proved."""
    request = RecordView(record_id=f"{VIEW_SOURCE}:view:{uuid.uuid4().hex}", what=what,
                         host=socket.gethostname(), replay_id=replay_id, since=since,
                         queue=queue, reference=reference)
    reply = client.call("audit_log", request, timeout_s=timeout_s).body
    if not isinstance(reply, RecordsAcked) or request.record_id not in reply.record_ids:
        raise CallFailed("not_recorded", "audit_log did not acknowledge the record of this "
                         "view; nothing is shown")


def who(record: AuditRecordOut) -> str:
    data = record.data
    if record.source == VIEW_SOURCE:
        return f"{data.get('os_user')}@{data.get('host')} (command)"
    person = data.get("account") or "the access token"
    return f"{person} ({data.get('role')}, console from {data.get('client')})"


def describe(record: AuditRecordOut) -> str:
    data = record.data
    when = datetime.fromtimestamp(record.at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    target = (f"replay {data['replay_id']}" if data.get("replay_id") else
              f"image {str(data.get('sha256'))[:16]}" if data.get("sha256") else
              f"item {data['queue']}/{data['reference']}" if data.get("reference") else
              f"queue {data['queue']}" if data.get("queue") else
              "the whole trail" if data.get("what") == "export" else "")
    return f"{when}  {who(record)}  saw {data.get('what')} {target}".rstrip()


def views_of(pages: Pages, args: argparse.Namespace) -> list[AuditRecordOut]:
    """The views of ``--person``, of ``--replay`` (its timeline, and its images wherever
    they were opened: an image is named by its hash only) or of ``--item`` (the item, and
    the exports of its whole queue)."""
    every = pages(AuditQuery(kind=DATA_VIEWED))
    if args.person is not None:
        return [r for r in every if args.person in (r.data.get("account"),
                                                    r.data.get("os_user"))]
    if args.item is not None:
        queue, _, reference = args.item.partition("/")
        return [r for r in every if r.data.get("queue") == queue
                and r.data.get("reference") in (reference, None)]
    images = {d for r in pages(AuditQuery(replay_id=args.replay))
              for d in r.screenshots.values()}
    return [r for r in every
            if r.data.get("replay_id") == args.replay or r.data.get("sha256") in images]


def access_command(pages: Pages, args: argparse.Namespace) -> int:
    found = views_of(pages, args)
    for record in found:
        print(json.dumps({"seq": record.seq, "at": record.at, "source": record.source,
                          **record.data}, ensure_ascii=False) if args.json
              else describe(record))
    if not args.json:
        whom = (f"person {args.person}" if args.person else f"item {args.item}" if args.item
                else f"replay {args.replay}")
        print(f"{len(found)} views recorded of {whom}", file=sys.stderr)
    return 0
