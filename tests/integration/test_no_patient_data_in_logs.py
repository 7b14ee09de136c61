"""No patient data in logs (docs/operations.md, "Logs"): a typed text and a sensitive input,
each a marker, go through replays that fail in every way this test can provoke (a target not
found, the agent killed during a step, the executor raising while it types, the dispatcher
killed while a step types, a report and a request carrying the marker where they should
not), and neither marker is in any log file of any process, nor in any bus event.

The audit trail keeps the typed text (a person may need to know what Léa typed, and sees it
where access is recorded); a log or an event is read by whoever runs the server.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

from messages.codec import PROTOCOL_VERSION
from messages.dispatch import ActionReport
from messages.replay import CancelReplay, ReplayStarted, StartReplay
from messages.workflow import Workflow
from tests.conftest import Spawn
from tests.integration.probes import Tap, ready_agent
from tests.integration.system import System, tree_door
from transport.client import CallFailed, SyncClient

TYPED = f"DUPONT-{uuid.uuid4().hex[:10]}"  # a patient's name Léa types (not an input)
SECRET = f"{uuid.uuid4().int % 10**6:06d}"  # the patient's IPP, a sensitive input
QUIET = {"RPA_LOOP_DETECTOR_ENABLED": "false"}
VALUE_SHOWN = re.compile(r"^\s*[│ ]*└ ")


def typing_workflow(workflow_id: str) -> Workflow:
    return Workflow.model_validate({
        "workflow_id": workflow_id,
        "inputs": [{"name": "ipp", "pattern": r"\d{6}", "sensitive": True}],
        "actions": [
            {"action_id": "name", "type": "type", "parameters": {"text": f"Nom {TYPED}"}},
            {"action_id": "ipp", "type": "type", "parameters": {"text": "IPP {{ipp}}"}},
            {"action_id": "slow", "type": "type", "parameters": {"text": f"{TYPED} {{{{ipp}}}}"}},
            {"action_id": "crash", "type": "type", "parameters": {"text": f"{TYPED}!"}},
            # A target that holds the sensitive value and is not on screen (its label is
            # the workflow's, shown in the pause: only the input in it is masked).
            {"action_id": "open", "type": "click", "target_spec": {"by_text": "Dossier {{ipp}}"}},
        ]})


def start(system: System, wf: Workflow, machine: str) -> str:
    reply = system.call("dispatcher", StartReplay(workflow=wf, machine_id=machine,
                                                  inputs={"ipp": SECRET}))
    assert isinstance(reply, ReplayStarted), reply
    return reply.replay_id


def test_typed_text_and_sensitive_inputs_are_in_no_log_nor_event(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path, extra_env=QUIET)
    tap = Tap(system)
    try:
        # A target not found: the step fails, is retried, and the replay pauses naming it.
        ready_agent(system, "W1", scenario={"actions": {"slow": {"delay_s": 0.0}}})
        lost = start(system, typing_workflow("lost"), "W1")
        assert system.wait_status(lost, "paused_need_help", "failed").pause_reason == \
            "target_not_found"
        system.call("dispatcher", CancelReplay(replay_id=lost, operator="test"))

        # The agent killed during a step that types (the scenario's crash: at once, as a
        # power cut), then started again on its data.
        crashing = ready_agent(system, "W2", scenario={"actions": {"crash": {
            "crash": "after", "times": 1}}})
        dead = start(system, typing_workflow("dead"), "W2")
        system.wait_status(dead, "paused_need_help", "failed", "completed", timeout=90)
        crashing.restart()

        # The executor raising while it types (the agent logs the exception: its frames hold
        # the action, typed text included).
        ready_agent(system, "W4", scenario={"actions": {"name": {"raise_in_input": True}}})
        raised = start(system, typing_workflow("raised"), "W4")
        system.wait_status(raised, "paused_need_help", "failed")
        system.call("dispatcher", CancelReplay(replay_id=raised, operator="test"))

        # The dispatcher killed while a step types; the supervisor restarts it.
        ready_agent(system, "W3", scenario={"actions": {"slow": {"delay_s": 3.0}}})
        cut = start(system, typing_workflow("cut"), "W3")
        system.wait_status(cut, "running", where=lambda s: s.completed_actions >= 2)
        system.kill("dispatcher")
        system.wait_status(cut, "paused_need_help", "failed", timeout=90)

        # Reports and requests that carry the values where they should not: refused.
        client = SyncClient(tree_door(system.env))
        try:
            bad = ActionReport(replay_id=cut, session_id="x", machine_id="W3",
                               action_id=f"step {TYPED}", attempt_id=SECRET, success=False,
                               error=f"typed {TYPED} {SECRET}")
            try:
                client.call("dispatcher", bad, timeout_s=5.0)
            except CallFailed:
                pass
            for body in ({"workflow": f"{TYPED} {SECRET}"},
                         {"workflow": {"workflow_id": TYPED, "actions": [SECRET]}}):
                client.raw("dispatcher", _raw_request("replay.start", body), timeout_s=5.0)
        finally:
            client.close()
        time.sleep(1.0)  # what the refusals logged reaches the files
        events = tap.events()
    finally:
        tap.close()
    assert any(e.topic == "lea:replay_paused" for e in events)
    for marker in (TYPED, SECRET):
        leaked = [e.topic for e in events if marker in e.model_dump_json()]
        assert not leaked, (marker, leaked)
    logs = [p for p in tmp_path.rglob("*.log") if p.is_file()]
    assert len(logs) >= 5, logs  # the tree's, and each agent's
    for marker in (TYPED, SECRET):
        found = {p.name: _line(p, marker) for p in logs if marker in p.read_text(errors="replace")}
        assert not found, (marker, found)
    # The executor's exception is logged with its traceback, and without the values of its
    # frames' variables (loguru's "diagnose" draws them under each line, "└ value"): a value
    # there is a repr cut at some length, which shows a patient's data when it is short.
    raised_log = "\n".join(p.read_text(errors="replace") for p in logs if "W4" in p.name)
    assert "executor failed on name" in raised_log and "Traceback" in raised_log
    shown = [line for line in raised_log.splitlines() if VALUE_SHOWN.match(line)]
    assert not shown, shown[:5]


def _raw_request(type_name: str, body: dict[str, Any]) -> bytes:
    """An envelope the codec refuses (its body does not validate)."""
    import msgpack

    return bytes(msgpack.packb({"v": PROTOCOL_VERSION, "id": uuid.uuid4().hex,
                                "type": type_name, "body": body}, use_bin_type=True))


def _line(path: Path, marker: str) -> str:
    return next(line for line in path.read_text(errors="replace").splitlines()
                if marker in line)[:400]

