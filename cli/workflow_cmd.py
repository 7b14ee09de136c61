"""``run.py workflow schema`` and ``run.py workflow check FILE``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from messages.workflow import Workflow, unlocatable
from workflow.inputs import unused
from workflow.outputs import reads
from workflow.safety_rules import needs_confirmation, with_confirmations


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="workflow_command", required=True)
    sub.add_parser("schema", help="print the workflow JSON Schema")
    check = sub.add_parser("check", help="validate a workflow file")
    check.add_argument("file", type=Path, help="the workflow JSON file")


def load_workflow(path: Path) -> Workflow:
    """The workflow in ``path``; raises ValueError with a readable, field-pointing message."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    try:
        return Workflow.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: invalid workflow\n" + describe(exc, data)) from None


def describe(exc: ValidationError, data: Any) -> str:
    """One line per error: where (with the action id when inside an action) and what."""
    lines = []
    for err in exc.errors():
        loc = err["loc"]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        hint = ""
        if len(loc) >= 2 and loc[0] == "actions" and isinstance(loc[1], int):
            try:
                hint = f" (action_id {data['actions'][loc[1]].get('action_id')!r})"
            except (AttributeError, IndexError, KeyError, TypeError):
                hint = ""
        message = err["msg"].removeprefix("Value error, ")
        lines.append(f"  {where or '(root)'}{hint}: {message}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.workflow_command == "schema":
        print(json.dumps(Workflow.model_json_schema(), indent=2, ensure_ascii=False))
        return 0
    try:
        workflow = load_workflow(args.file)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    problems = unlocatable(workflow.actions)
    if problems:
        # Replayed, such a step could only fail, or act blind: refused here.
        print(f"error: {args.file}: " + "\n  ".join(["actions the agent cannot locate:",
                                                       *problems]), file=sys.stderr)
        return 1
    try:
        confirmed = [a.action_id for a in workflow.actions if needs_confirmation(a)]
        with_confirmations(workflow)
    except ValueError as exc:
        print(f"error: {args.file}: a confirming pause cannot be added: {exc}",
              file=sys.stderr)
        return 1
    kinds = sorted({a.type for a in workflow.actions})
    print(f"ok: {workflow.workflow_id}: {len(workflow.actions)} actions ({', '.join(kinds)})")
    if confirmed:
        print(f"  a person confirms before: {', '.join(confirmed)} (marked critical)")
    if workflow.inputs:
        print(f"  inputs: {', '.join(i.name for i in workflow.inputs)}")
    outputs = reads(workflow)
    if outputs:
        print(f"  outputs: {', '.join(outputs)}")
    for name in unused(workflow):
        print(f"warning: input {name!r} is declared but used by no action", file=sys.stderr)
    return 0
