"""``run.py demo``: the whole system on this machine, for a newcomer.

Starts the tree and a simulated agent on free ports with their own data directory, replays
the example workflow, prints the events as they happen and, at the pause, asks the person at
the terminal to acknowledge each safety check before resuming. ``--ollama-stub``: Léa's
contextual checks come from a stand-in Ollama server (cli/ollama_stub.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

import zmq

from actors import ACTORS
from cli.ollama_stub import OllamaStub
from cli.ping import ping_service
from cli.replay_cmd import check_lines, describe, pause_lines
from cli.tap import format_event
from cli.workflow_cmd import load_workflow
from messages import events
from messages.events import Event
from messages.replay import (
    GetReplayStatus,
    ReplayStarted,
    ReplayStatusReply,
    ReplaySummary,
    ResumeReplay,
    StartReplay,
)
from runtime.settings import Settings, settings_env
from transport.bus import Subscriber
from transport.client import CallFailed, SyncClient

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "admission_note.json"
MACHINE = "DEMO-PC"
QUIET = ("lea:peer_connected", "lea:peer_disconnected", "lea:monitor_routed")


def narrate(event: Event) -> str:
    """One short line a newcomer can follow; other events in the ``tap`` format."""
    d = event.data
    step = d.get("action_id", "")
    if event.topic == events.ACTION_DISPATCHED:
        resend = f" (resent: {d.get('resend_reason')})" if d.get("resent_count") else ""
        return f"→ {step} ({d.get('action_type')}) sent to {d.get('machine_id')}{resend}"
    if event.topic == events.ACTION_ACKED:
        if d.get("success"):
            return f"✓ {step} done" + (f" [{d['warning']}]" if d.get("warning") else "")
        return f"✗ {step} failed: {d.get('error')}"
    if event.topic == events.REPLAY_PAUSED:
        return f"⏸ paused at {step}: {d.get('reason')}"
    if event.topic == events.REPLAY_RESUMED:
        return f"▶ resumed by {d.get('operator')} (checks {d.get('acknowledged_check_ids')})"
    if event.topic == events.REPLAY_COMPLETED:
        return f"✔ replay completed: {d.get('completed_actions')}/{d.get('total')} steps"
    if event.topic == events.SAFETY_CHECKS_GENERATED:
        from_lea = list(d.get("sources") or []).count("llm_contextual")
        return (f"☑ checklist for {step}: {d.get('count')} check(s)"
                + (f", {from_lea} suggested by Léa" if from_lea else ""))
    if event.topic == events.SAFETY_CHECKS_LLM_FAILED:
        return (f"⚠ Léa could not look at the screen for {step} ({d.get('cause')}): "
                f"{d.get('detail')}")
    if event.topic == events.LOOP_DETECTED:
        return f"⟳ Léa seems stuck: {d.get('signal')} {d.get('evidence')}"
    if event.topic == events.REPLAY_STARTED:
        return f"replay {d.get('replay_id')} started ({d.get('total')} steps, {d.get('mode')})"
    return format_event(event)


def _free_endpoint() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _echo_events(settings: Settings, stop: threading.Event, muted: threading.Event,
                 out: TextIO) -> None:
    sub = Subscriber(zmq.Context.instance(), settings.bus_out_endpoint)
    try:
        while not stop.is_set():
            event = sub.recv(timeout_s=0.2)
            if event is not None and event.topic not in QUIET and not muted.is_set():
                print(f"  {narrate(event)}", file=out, flush=True)
    finally:
        sub.close()


def ask_checks(summary: ReplaySummary, ask: TextIO = sys.stdin,
               out: TextIO = sys.stdout) -> list[str]:
    """Show the pause and its checklist (as ``replay status`` does), then ask for each check;
    returns the ids acknowledged. A required check is asked again until it is done: Léa
    does not continue before (Ctrl-C stops the demo). Léa's suggestions are optional."""
    print("\n=== Léa is paused ===", file=out)
    for line in pause_lines(summary, hint=False):
        print(line, file=out)
    acked = []
    width = max((len(c.id) for c in summary.safety_checks), default=0)
    for check in summary.safety_checks:
        print(file=out)
        while True:
            for line in check_lines(check, box="[?]", id_width=width):
                print(f"  {line}", file=out)
            answer = _input("  Done? [y/n] ", ask, out).strip().lower()
            if answer in ("y", "yes", "o", "oui"):
                acked.append(check.id)
                break
            if not check.required:
                break
            print("  This check is REQUIRED: Léa will not continue until it is done.",
                  file=out)
    if summary.safety_checks:
        print("\n" + "\n".join(f"  {'[x]' if c.id in acked else '[ ]'} {c.id}"
                               for c in summary.safety_checks), file=out)
    else:
        _input("Press Enter to let Léa continue... ", ask, out)
    return acked


def _input(prompt: str, stream: TextIO, out: TextIO = sys.stdout) -> str:
    print(prompt, end="", file=out, flush=True)
    line = stream.readline()
    if not line:
        raise EOFError("no answer on standard input")
    return line


def run(settings: Settings, workflow_path: Path = EXAMPLE, ollama_stub: bool = False) -> int:
    data_dir = settings.data_dir / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    console_port = settings.console_port and int(_free_endpoint().rsplit(":", 1)[1])
    demo = settings.model_copy(update={
        "mdp_endpoint": _free_endpoint(), "bus_in_endpoint": _free_endpoint(),
        "bus_out_endpoint": _free_endpoint(), "data_dir": data_dir,
        "console_port": console_port})
    env = {**os.environ, **settings_env(demo), "LEA_LOG_LEVEL": "WARNING"}
    workflow = load_workflow(workflow_path)
    stub = None
    if ollama_stub:  # no model here: a stand-in answers like Ollama with canned checks
        stub = OllamaStub("good").start()
        env["OLLAMA_URL"] = stub.url
        print(f"Léa's model: a stand-in Ollama server on {stub.url} (cli/ollama_stub.py).")
    print(f"Starting the tree (data in {data_dir}) and a simulated agent {MACHINE}...")
    procs = [
        subprocess.Popen([sys.executable, "-m", "cli", "up"], env=env, cwd=ROOT),
        subprocess.Popen([sys.executable, "-m", "agent", "--machine-id", MACHINE,
                          "--effects-log", str(data_dir / "effects.jsonl")], env=env, cwd=ROOT),
    ]
    stop, muted = threading.Event(), threading.Event()
    echo = threading.Thread(target=_echo_events, args=(demo, stop, muted, sys.stdout),
                            daemon=True)
    echo.start()
    client = SyncClient(demo.control_mdp_endpoint)
    try:
        if not tree_answers(client):
            return 1
        print(f"All six actors answer. Replaying {workflow.workflow_id} "
              f"({len(workflow.actions)} steps):")
        if console_port:
            print(f"(The pause can also be answered in the browser: "
                  f"http://{demo.console_host}:{console_port}/ with an operator account: "
                  f"python run.py --data-dir {data_dir} accounts add NAME --role operator)")
        started = client.call("dispatcher", StartReplay(
            workflow=workflow, machine_id=MACHINE, operator="demo")).body
        assert isinstance(started, ReplayStarted)
        return _follow(client, started.replay_id, muted)
    except (CallFailed, EOFError, KeyboardInterrupt) as exc:
        print(f"\nstopped: {exc or 'interrupted'}", file=sys.stderr)
        return 1
    finally:
        stop.set()
        client.close()
        stop_all(procs)
        if stub is not None:
            stub.stop()


def tree_answers(client: SyncClient, within_s: float = 30) -> bool:
    """Wait until every actor answers a ping; False (and why, on stderr) if not in time."""
    deadline = time.monotonic() + within_s
    while not all(ping_service(client, s, 0.5)["status"] == "ok" for s in ACTORS):
        if time.monotonic() > deadline:
            print(f"error: the tree did not come up in {within_s:g} s", file=sys.stderr)
            return False
        time.sleep(0.2)
    return True


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM in reverse start order, then wait (SIGKILL after a while)."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _follow(client: SyncClient, replay_id: str, muted: threading.Event) -> int:
    operator = None
    while True:
        reply = client.call("dispatcher", GetReplayStatus(replay_id=replay_id)).body
        assert isinstance(reply, ReplayStatusReply)
        summary = reply.replays[0]
        if summary.status == "paused_need_help":
            muted.set()
            if operator is None:
                operator = _input("Your name (for the audit trail): ", sys.stdin).strip() \
                    or "demo"
            acked = ask_checks(summary)
            try:
                client.call("dispatcher", ResumeReplay(
                    replay_id=replay_id, acknowledged_check_ids=acked, operator=operator))
            except CallFailed as exc:
                print(f"Resume refused: {exc}")
            muted.clear()
        elif summary.status != "running":
            time.sleep(0.3)  # let the last events print
            print("\n" + describe(summary))
            return 0 if summary.status == "completed" else 1
        time.sleep(0.2)
