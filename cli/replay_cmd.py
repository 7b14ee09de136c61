"""``run.py replay start|status|pause|resume|cancel``: control commands sent to the dispatcher."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO, TypeVar

from cli.brokers import said_passive
from cli.workflow_cmd import load_workflow
from messages.base import Message
from messages.replay import (
    Ack,
    CancelReplay,
    GetReplayStatus,
    PauseReplay,
    ReplayCancelled,
    ReplayResumed,
    ReplayStarted,
    ReplayStatusReply,
    ReplaySummary,
    ResumeReplay,
    SafetyCheck,
    StartReplay,
)
from runtime.settings import Settings
from transport.client import CallFailed, SyncClient
from workflow.inputs import value_problems

_R = TypeVar("_R", bound=Message)

# Exit codes of `replay start --wait`, so scripts can tell the outcomes apart.
EXIT_COMPLETED, EXIT_ERROR, EXIT_PAUSED, EXIT_FAILED = 0, 1, 3, 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="replay_command", required=True)
    start = sub.add_parser("start", help="start replaying a workflow file on a machine")
    start.add_argument("file", type=Path, help="the workflow JSON file")
    start.add_argument("--machine-id", required=True, metavar="M",
                       help="the workstation whose agent replays it (agent.<M>)")
    start.add_argument("--mode", choices=["supervised", "autonomous"], default="supervised",
                       help="supervised (default): every pause_for_human waits for a person; "
                            "autonomous: only medical_critical pauses and failures do")
    start.add_argument("--session-id", help="replays of one session on one machine run one "
                       "after the other (default: a new session)")
    start.add_argument("--operator", help="who starts it (recorded in the audit trail)")
    start.add_argument("--input", action="append", default=[], metavar="NAME=VALUE",
                       dest="inputs", help="a value of the workflow's declared inputs "
                       "(repeat for each; checked before anything is sent)")
    start.add_argument("--wait", action="store_true",
                       help="follow progress; exit 0 completed, 3 paused, 4 failed/cancelled")
    status = sub.add_parser("status", help="show one replay, or all of them")
    status.add_argument("replay_id", nargs="?", help="default: every replay")
    pause = sub.add_parser("pause", help="pause a running replay before its next step "
                           "(the step in flight finishes)")
    pause.add_argument("replay_id", help="the id replay start printed")
    pause.add_argument("--operator", help="who pauses (recorded in the audit trail)")
    pause.add_argument("--message", help="shown to the supervisor (default: who paused)")
    resume = sub.add_parser("resume", help="resume a paused replay")
    resume.add_argument("replay_id", help="the id replay start printed")
    resume.add_argument("--ack", action="append", default=[], metavar="CHECK_ID",
                        help="a safety check acknowledged (repeat for each)")
    resume.add_argument("--operator", help="who resumes (required when the pause has "
                        "required checks; recorded in the audit trail)")
    resume.add_argument("--step", choices=["done", "redo"], help=(
        "at a pause a failed step caused: done (it is done, by Léa or by hand: go on) or "
        "redo (Léa does it again); default done when its input may have gone out "
        "(failed_after_input, input_unknown), else redo"))
    cancel = sub.add_parser("cancel", help="cancel a replay")
    cancel.add_argument("replay_id", help="the id replay start printed")
    cancel.add_argument("--operator", help="who cancels (recorded in the audit trail)")
    for p in (start, status, pause, resume, cancel):
        p.add_argument("--json", action="store_true", help="JSON output for scripts")
        p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait per try")


# What a pause reason means, for the person reading `replay status`.
REASONS = {
    "user_request": "the workflow asks a person to check before going on",
    "system_dialog": "a system window blocks the screen",
    "wrong_window": "the expected window is not on screen",
    "needs_human": "the agent asks for help",
    "target_not_found": "the target was not found after every retry",
    "ambiguous_target": "the target's text is on screen more than once, nothing tells which",
    "action_failed": "a step keeps failing",
    "orphan_max_resends": "the agent did not answer for a step",
    "guard_lost": "the agent did not answer a screen check: nothing runs until a person looked",
    "failed_after_input": "a step failed after its input: it is not redone, check the screen",
    "input_unknown": "nobody knows whether a step's input went out: check the screen",
    "dead_client": "the agent stopped answering",
    "operator": "paused by an operator",
    "loop_detected": "Léa seems to go round in circles",
    "identity_mismatch": "the patient's identifier expected on screen was not read there",
    "output_invalid": "a value to read on screen was not read, or does not fit its pattern",
    "output_missing": "a step uses a value no step of this replay has read",
}
SOURCES = {"declarative": "workflow", "llm_contextual": "Léa, suggestion", "system": "system"}


def check_lines(check: SafetyCheck, box: str = "[ ]", id_width: int = 0) -> list[str]:
    """One check as a person reads it: what to do, whether it is required, who asks, why.

    A suggestion of the model is marked ``[Léa, suggestion]`` with what it saw on screen,
    so it is never mistaken for a required check of the workflow."""
    need = "REQUIRED" if check.required else "optional"
    lines = [f"{box} {check.id:<{id_width}}  {need:<8}  "
             f"[{SOURCES.get(check.source, check.source)}]  {check.label}"]
    if check.evidence:
        what = "Léa saw" if check.source == "llm_contextual" else "why"
        lines.append(f"      {what}: {check.evidence}")
    return lines


def pause_lines(summary: ReplaySummary, hint: bool = True) -> list[str]:
    """Why a replay is paused, what it says, and the checks to acknowledge before resuming
    (``hint``: and the command that resumes it)."""
    reason = summary.pause_reason or "unknown"
    meaning = REASONS.get(reason)
    lines = [f"  paused: {reason}" + (f" ({meaning})" if meaning else "")]
    if summary.pause_action_id:
        lines.append(f"  at step {summary.pause_action_id}"
                     + (f": {summary.pause_intention}" if summary.pause_intention else ""))
    lines.extend(f"    {line}" for line in (summary.pause_message or "").splitlines())
    checks = summary.safety_checks
    if checks:
        required = [c.id for c in checks if c.required]
        lines.append(f"  checks to acknowledge ({len(required)} required of {len(checks)}):")
        width = max(len(c.id) for c in checks)
        for check in checks:
            lines.extend(f"    {line}" for line in check_lines(check, id_width=width))
    if hint:
        acks = "".join(f" --ack {c.id}" for c in checks if c.required)
        lines.append(f"  {'once checked' if checks else 'resume'}: python run.py replay "
                     f"resume {summary.replay_id}{acks} --operator NAME")
    return lines


def describe(summary: ReplaySummary) -> str:
    """A replay as a person reads it."""
    lines = [
        f"replay {summary.replay_id}  [{summary.status}]",
        f"  workflow {summary.workflow_id} on {summary.machine_id} "
        f"(session {summary.session_id}, {summary.mode})",
        f"  progress {summary.completed_actions}/{summary.total}"
        + (f", current step {summary.current_action_id}" if summary.current_action_id else "")
        + (f", {summary.queue_length} queued"
           if summary.status in ("running", "paused_need_help") else ""),
    ]
    lines.extend(f"  output {name} = {value}" for name, value in summary.outputs.items())
    if summary.status == "paused_need_help":
        lines.extend(pause_lines(summary))
    return "\n".join(lines)


def _emit(reply: Message, as_json: bool, text: str, out: TextIO = sys.stdout) -> None:
    print(json.dumps(reply.model_dump(mode="json"), ensure_ascii=False) if as_json else text,
          file=out)


def _status(client: SyncClient, replay_id: str, timeout: float) -> ReplaySummary:
    return _ask(client, GetReplayStatus(replay_id=replay_id), ReplayStatusReply,
                timeout).replays[0]


def follow(client: SyncClient, replay_id: str, timeout: float, out: TextIO = sys.stderr) -> int:
    """Draw a progress bar until the replay completes, pauses or fails; its exit code."""
    while True:
        summary = _status(client, replay_id, timeout)
        done = summary.completed_actions
        width = 30
        filled = width * done // max(1, summary.total)
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{summary.total} "
              f"{summary.status:<18}", end="", file=out, flush=True)
        if summary.status != "running":
            print(file=out)
            print(describe(summary))
            return {"completed": EXIT_COMPLETED, "paused_need_help": EXIT_PAUSED}.get(
                summary.status, EXIT_FAILED)
        time.sleep(0.2)


def run(settings: Settings, args: argparse.Namespace) -> int:
    # The people's door: the server learns this process's OS account from the kernel and
    # records it beside --operator (docs/operations.md, "Who may change replays").
    if said_passive(settings, args.json):
        return EXIT_ERROR
    client = SyncClient(settings.control_mdp_endpoint)
    try:
        return _run(client, args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except CallFailed as exc:
        if args.json:
            print(json.dumps({"error": exc.code, "message": exc.message, "detail": exc.detail},
                             ensure_ascii=False))
        hint = " (is the tree running? python run.py)" if exc.code == "timeout" else ""
        print(f"error: {exc}{hint}", file=sys.stderr)
        for key, value in exc.detail.items():
            shown = ", ".join(map(str, value)) if isinstance(value, list) else value
            print(f"  {key}: {shown}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        client.close()


def parse_inputs(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` options as a dict; a malformed or repeated one is refused."""
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--input {name.strip() or pair!r}: expected NAME=VALUE")
        if name.strip() in values:
            raise ValueError(f"--input {name.strip()}: given twice")
        values[name.strip()] = value
    return values


def _ask(client: SyncClient, message: Message, kind: type[_R], timeout: float) -> _R:
    """The dispatcher's reply to ``message``, of the one type it answers it with."""
    reply = client.call("dispatcher", message, timeout_s=timeout).body
    assert isinstance(reply, kind)
    return reply


def _run(client: SyncClient, args: argparse.Namespace) -> int:
    if args.replay_command == "start":
        started = _ask(client, _start_request(args), ReplayStarted, args.timeout)
        _emit(started, args.json, started.replay_id)
        return follow(client, started.replay_id, args.timeout) if args.wait else 0
    reply, text = _control(client, args)
    _emit(reply, args.json, text)
    return 0


def _start_request(args: argparse.Namespace) -> StartReplay:
    workflow = load_workflow(args.file)
    values = parse_inputs(args.inputs)
    wrong = value_problems(workflow.inputs, values)
    if wrong:  # the dispatcher refuses them too; said here before any call
        raise ValueError("the input values do not satisfy the workflow's declaration "
                         "(nothing was started):\n  " + "\n  ".join(wrong))
    return StartReplay(workflow=workflow, machine_id=args.machine_id, mode=args.mode,
                       session_id=args.session_id, operator=args.operator, inputs=values)


def _control(client: SyncClient, args: argparse.Namespace) -> tuple[Message, str]:
    """status, pause, resume or cancel: the reply, and what it says to a person."""
    command, rid, timeout = args.replay_command, args.replay_id, args.timeout
    if command == "status":
        status = _ask(client, GetReplayStatus(replay_id=rid), ReplayStatusReply, timeout)
        return status, "\n".join(describe(s) for s in status.replays) or "no replays"
    if command == "pause":
        paused = _ask(client, PauseReplay(replay_id=rid, operator=args.operator,
                                          message=args.message), Ack, timeout)
        inflight = paused.detail.get("inflight_action_id")
        return paused, (f"paused {rid}: nothing further is dispatched"
                        + (f"; step {inflight} in flight finishes and is recorded"
                           if inflight else "")
                        + f"\n  resume with: python run.py replay resume {rid}")
    if command == "resume":
        resumed = _ask(client, ResumeReplay(replay_id=rid, acknowledged_check_ids=args.ack,
                                            operator=args.operator, step=args.step),
                       ReplayResumed, timeout)
        return resumed, (f"resumed {resumed.replay_id}: {resumed.remaining_actions} "
                         "action(s) left")
    cancelled = _ask(client, CancelReplay(replay_id=rid, operator=args.operator),
                     ReplayCancelled, timeout)
    return cancelled, (f"{cancelled.status} {cancelled.replay_id}"
                       + (" (cancelled at a pause a failure caused)"
                          if cancelled.status == "failed" else ""))
