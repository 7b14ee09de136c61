"""``run.py queue create|add|list|show|item|retry|skip|cancel|export``: work queues, sent to the
dispatcher on the same path as ``replay`` commands (docs/queues.md)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

from cli import audit_access
from cli.brokers import said_passive
from cli.replay_cmd import EXIT_ERROR
from cli.workflow_cmd import load_workflow
from messages.base import Message
from messages.inputs import InputSpec
from messages.queue import (
    AddItems,
    CreateQueue,
    GetItem,
    ItemCommand,
    ItemStateName,
    ListQueues,
    QueueReply,
    ShowQueue,
)
from runtime.settings import Settings
from transport.client import CallFailed, SyncClient
from workflow import queue_files

STATES = get_args(ItemStateName)
NAME_HELP = "the queue's name: 1-64 letters, digits, '_', '.', '-'"
ROWS_SHOWN = 50
"""Refused rows printed; the count says how many more (``--json`` has them all)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="queue_command", required=True)
    create = sub.add_parser("create", help="a queue running one workflow over its items")
    create.add_argument("name", help=NAME_HELP)
    create.add_argument("--workflow", type=Path, required=True, metavar="FILE",
                        help="the workflow JSON file its items run (with declared inputs)")
    create.add_argument(
        "--pool",
        default="default",
        help="the agents that serve it (run.py agent --pool; default 'default')",
    )
    create.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        metavar="N",
        help="attempts of an item whose system failures came before any input",
    )
    add = sub.add_parser("add", help="add the items of a CSV or JSON lines file, all or none")
    add.add_argument("name", help="the queue")
    add.add_argument("file", type=Path, help="CSV (';' or ',', UTF-8 or Windows-1252) or "
                     "JSON lines: a 'reference' and the inputs per item (docs/queues.md)")
    sub.add_parser("list", help="queues with their counts by state, and the agents")
    show = sub.add_parser("show", help="a queue's items")
    show.add_argument("name", help="the queue")
    show.add_argument("--state", action="append", default=[], choices=STATES,
                      help="only items in this state (repeat for more)")
    show.add_argument("--limit", type=int, default=1000, help="at most this many items")
    item = sub.add_parser("item", help="one item, with its history")
    item.add_argument("name", help="the queue")
    item.add_argument("reference", help="the item's reference")
    for verb, what in (
        ("retry", "try it again (a new replay)"),
        ("skip", "handled outside: no replay will run it"),
        ("cancel", "stop it (its replay too)"),
    ):
        p = sub.add_parser(verb, help=what)
        p.add_argument("name", help="the queue")
        p.add_argument("reference", help="the item's reference")
        p.add_argument("--operator", required=True, help="who decides (audit trail)")
    export = sub.add_parser("export", help="the items as CSV for a spreadsheet (stdout)")
    export.add_argument("name", help="the queue")
    for p in sub.choices.values():
        p.add_argument("--json", action="store_true", help="JSON output for scripts")
        p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait per try")
    create.add_argument("--operator", help="who creates it (audit trail)")
    add.add_argument("--operator", help="who adds them (audit trail)")


def run(settings: Settings, args: argparse.Namespace) -> int:
    # The people's door: queue changes are taken there only, under the caller's OS
    # account (docs/operations.md, "Who may change replays").
    if said_passive(settings, args.json):
        return EXIT_ERROR
    client = SyncClient(settings.control_mdp_endpoint)
    try:
        return _run(client, args)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except CallFailed as exc:
        if args.json:
            print(
                json.dumps(
                    {"error": exc.code, "message": exc.message, "detail": exc.detail},
                    ensure_ascii=False,
                )
            )
        hint = " (is the tree running? python run.py)" if exc.code == "timeout" else ""
        print(f"error: {exc}{hint}", file=sys.stderr)
        _print_rows(exc.detail.get("rows", []), exc.detail.get("refused", 0))
        return EXIT_ERROR
    finally:
        client.close()


def _call(client: SyncClient, msg: Message, timeout: float) -> QueueReply:
    reply = client.call("dispatcher", msg, timeout_s=timeout).body
    if not isinstance(reply, QueueReply):
        raise ValueError(f"unexpected answer {reply!r}")
    return reply


def _run(client: SyncClient, args: argparse.Namespace) -> int:
    cmd, name, timeout = args.queue_command, getattr(args, "name", ""), args.timeout
    if cmd == "create":
        reply = _call(
            client,
            CreateQueue(
                name=name,
                workflow=load_workflow(args.workflow),
                pool=args.pool,
                max_attempts=args.max_attempts,
                operator=args.operator,
            ),
            timeout,
        )
        return _emit(reply, args.json, f"queue {name} created (pool {args.pool})")
    if cmd == "add":
        return _add(client, args)
    if cmd == "list":
        reply = _call(client, ListQueues(), timeout)
        return _emit(reply, args.json, _list_text(reply))
    if cmd in ("show", "export"):
        reply = _call(
            client,
            ShowQueue(
                queue=name, states=getattr(args, "state", []), limit=getattr(args, "limit", 100_000)
            ),
            timeout,
        )
        if cmd == "export":
            # The items' inputs are patient data: the view is recorded before it is shown.
            audit_access.record_view(client, "queue_export", timeout, queue=name)
            workflow = _workflow_of(client, name, timeout)
            sys.stdout.buffer.write(queue_files.export(reply.items, workflow))
            return 0
        return _emit(reply, args.json, _show_text(reply))
    if cmd == "item":
        audit_access.record_view(client, "queue_item", timeout, queue=name,
                                 reference=args.reference)
        reply = _call(client, GetItem(queue=name, reference=args.reference), timeout)
        return _emit(reply, args.json, _item_text(reply.items[0]))
    reply = _call(
        client,
        ItemCommand(
            queue=name,
            reference=args.reference,
            command=cmd,
            operator=args.operator,
        ),
        timeout,
    )
    return _emit(reply, args.json, f"{name}/{args.reference}: {reply.items[0]['state']}")


def _workflow_of(client: SyncClient, name: str, timeout: float) -> list[InputSpec]:
    """The declared inputs of queue ``name``'s workflow."""
    reply = _call(client, ListQueues(), timeout)
    queue = next((q for q in reply.queues if q["name"] == name), None)
    if queue is None:
        raise ValueError(f"no queue {name} (python run.py queue list)")
    return [InputSpec.model_validate(i) for i in queue.get("inputs", [])]


def _add(client: SyncClient, args: argparse.Namespace) -> int:
    """The file is checked here first, every row reported; the dispatcher checks it again
    (references already in the queue) and adds it whole or not at all."""
    data = args.file.read_bytes()
    declared = _workflow_of(client, args.name, args.timeout)
    parsed = queue_files.parse(data, declared, args.file.name)
    if not parsed.ok:
        if args.json:
            print(
                json.dumps(
                    {"error": "items_refused", "problems": parsed.problems, "rows": parsed.rows},
                    ensure_ascii=False,
                )
            )
        print(f"error: {args.file}: refused, nothing was added", file=sys.stderr)
        for problem in parsed.problems:
            print(f"  {problem}", file=sys.stderr)
        _print_rows(parsed.rows, len(parsed.rows))
        return EXIT_ERROR
    added = _call(
        client,
        AddItems(queue=args.name, items=parsed.items, operator=args.operator),
        args.timeout,
    )
    return _emit(added, args.json, f"{len(parsed.items)} item(s) added to {args.name}")


def _print_rows(rows: list[dict[str, Any]], refused: int) -> None:
    for row in rows[:ROWS_SHOWN]:
        where = f"row {row['row']}" + (f" (line {row['line']})" if row.get("line") else "")
        ref = f" {row['reference']}" if row.get("reference") else ""
        print(f"  {where}{ref}: {'; '.join(row['problems'])}", file=sys.stderr)
    if refused > ROWS_SHOWN:
        print(
            f"  ... and {refused - ROWS_SHOWN} more row(s) (--json lists them all)", file=sys.stderr
        )


def _emit(reply: QueueReply, as_json: bool, text: str) -> int:
    print(reply.model_dump_json() if as_json else text)
    return 0


def _when(at: float | None) -> str:
    return "-" if at is None else datetime.fromtimestamp(at).strftime("%d/%m/%Y %H:%M")


def _list_text(reply: QueueReply) -> str:
    lines = []
    for q in reply.queues:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(q["counts"].items())) or "empty"
        risk = f", {q['at_risk']} at risk" if q.get("at_risk") else ""
        lines.append(
            f"{q['name']} (pool {q['pool']}, {q['workflow_id']}): {counts}; oldest "
            f"waiting {q['oldest_waiting_s']:.0f} s{risk}"
        )
    for a in reply.detail.get("agents", []):
        lines.append(f"agent {a['machine_id']} (pool {a['pool']}): {a['state']}")
    return "\n".join(lines) or "no queues"


def _show_text(reply: QueueReply) -> str:
    lines = [_list_text(QueueReply(queues=reply.queues))]
    lines += [
        f"  {i['reference']:<20} {i['state']:<16} {i['priority']:<6} deadline "
        f"{_when(i['deadline'])}  attempts {i['attempts']}  {i['machine_id'] or '-'}"
        + (f"  ({i['reason']})" if i.get("reason") else "")
        for i in reply.items
    ]
    more = reply.detail.get("matching", 0) - len(reply.items)
    if more > 0:
        lines.append(f"  ... and {more} more (--limit)")
    return "\n".join(lines)


def _item_text(item: dict[str, Any]) -> str:
    lines = [
        f"{item['queue']}/{item['reference']}: {item['state']}"
        + (f" ({item['reason']})" if item.get("reason") else ""),
        f"  priority {item['priority']}, deadline {_when(item['deadline'])}, not before "
        f"{_when(item['not_before'])}, attempts {item['attempts']}",
        f"  inputs: {json.dumps(item['inputs'], ensure_ascii=False)}",
    ]
    if item.get("outputs"):
        lines.append(f"  outputs: {json.dumps(item['outputs'], ensure_ascii=False)}")
    lines += [
        f"  {_when(h['at'])}  {h['state']:<16} {h.get('machine_id') or '-':<12} "
        f"{h.get('replay_id') or '-'}" + (f"  {h['reason']}" if h.get("reason") else "")
        for h in item["history"]
    ]
    return "\n".join(lines)
