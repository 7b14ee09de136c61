"""Bad input to the control plane, through real processes: stray and forged reports sent to
the dispatcher, malformed workflow files and wrong commands through ``python run.py`` as a
person types them. Each is refused with a clear error (and a non-zero exit), and the state
never changes half-way: after every refusal the replays' status and in-flight table are
exactly as before (``updated_at`` included)."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from messages.codec import decode, encode
from messages.dispatch import ActionReport, ReportAck
from messages.replay import Ack, GetReplayStatus, PauseReplay, ReplayStatusReply
from tests.conftest import Spawn
from tests.integration.invariants import assert_server_invariants, snapshot
from tests.integration.probes import (
    cli,
    progress,
    ready_agent,
    refused_call,
    report_statuses,
)
from tests.integration.system import System, clicks, workflow

PAUSED = "paused_need_help"
CHECKS = [{"id": "allergy", "label": "Allergies vérifiées"},
          {"id": "identity", "label": "Identité du patient confirmée"},
          {"id": "note", "label": "Note relue", "required": False}]


@pytest.fixture
def system(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> System:
    # A watchdog that never acts during a test: nothing moves unless a request moves it.
    return System(spawn, lea_env, tmp_path, extra_env={"RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "120"})


class Frozen:
    """Replays in a state nothing moves by itself: ``paused`` waits at a pause_for_human
    with checks (on M1), ``busy`` has s0 in flight to M2, which has no agent (so no hello
    can re-send it, and the watchdog is too slow to)."""

    def __init__(self, system: System) -> None:
        self.system = system
        ready_agent(system, "M1")
        human = {"type": "pause_for_human", "parameters": {
            "message": "Vérifications avant injection", "safety_checks": CHECKS}}
        self.paused = system.start(workflow(*clicks(1), human, *clicks(1)), "M1")
        self.busy = system.start(workflow(*clicks(2), workflow_id="wf-busy"), "M2")
        system.wait_status(self.paused, PAUSED)
        system.wait_status(self.busy, "running", where=lambda s: s.current_action_id == "s0")
        self.before = self.state()

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for rid in (self.paused, self.busy):
            s, entries = snapshot(self.system, rid)
            out[rid] = (progress(s), [e for e in entries if e.replay_id == rid])
        return out

    def assert_unchanged(self, after_what: str) -> None:
        assert self.state() == self.before, f"state changed after {after_what}"
        for rid in (self.paused, self.busy):
            assert_server_invariants(self.system, rid)


@pytest.fixture
def frozen(system: System) -> Frozen:
    return Frozen(system)


def report(replay_id: str, action_id: str, machine_id: str = "M1", session_id: str = "x",
           attempt_id: str | None = None) -> ActionReport:
    return ActionReport(replay_id=replay_id, session_id=session_id, machine_id=machine_id,
                        action_id=action_id, attempt_id=attempt_id or uuid.uuid4().hex,
                        success=True)


def test_stray_and_forged_reports_are_answered_recorded_and_change_nothing(
        frozen: Frozen) -> None:
    """Reports for an unknown replay / action / attempt are acked (so the agent stops
    resending) with ``unknown`` / ``duplicate`` / ``stale`` and never applied; a report
    naming a machine other than the one the action was sent to is refused
    (``wrong_machine``) and recorded."""
    system, busy, paused = frozen.system, frozen.busy, frozen.paused
    (entry,) = [e for e in system.inflight().entries if e.replay_id == busy]
    sid = system.status(busy).session_id
    cases = [
        (report("no-such-replay", "s0"), "unknown"),
        (report(paused, "s7"), "unknown"),  # no such step
        (report(paused, "s0"), "duplicate"),  # a done step, an attempt that never was
        (report(busy, "s0", "M2", sid), "stale"),  # the step in flight, another attempt
        (report(busy, "s1", "M2", sid, entry.attempt_id), "unknown"),  # attempt, wrong step
    ]
    for msg, expected in cases:
        ack = system.call("dispatcher", msg)
        assert isinstance(ack, ReportAck) and ack.status == expected, (msg, ack)
        frozen.assert_unchanged(f"a report of {msg.replay_id}/{msg.action_id}")
        assert expected in report_statuses(system, msg.replay_id, msg.action_id)
    forged = [report(busy, "s0", "M1", sid, entry.attempt_id),  # right attempt, wrong machine
              report(paused, "s0", "M2")]  # a done step of M1's replay
    for msg in forged:
        error = refused_call(system, "dispatcher", msg)
        assert error.code == "wrong_machine" and error.detail["action_id"] == msg.action_id
        frozen.assert_unchanged(f"a report of {msg.action_id} from {msg.machine_id}")
        assert "refused" in report_statuses(system, msg.replay_id, msg.action_id)


BAD_WORKFLOWS: dict[str, tuple[str, list[str]]] = {
    # name: (file content, what the error must point at)
    "not_json": ('{"workflow_id": "wf", "actions": [', ["not JSON", ":1:"]),
    "wrong_types": (json.dumps({"workflow_id": "wf", "actions": [
        {"action_id": "s0", "type": "wait", "parameters": {"duration_ms": "soon"}},
        {"action_id": 7, "type": "click"}]}),
        ["actions[0] (action_id 's0')", "duration_ms", "actions[1].action_id"]),
    "unknown_type": (json.dumps({"workflow_id": "wf", "actions": [
        {"action_id": "s0", "type": "teleport"}]}), ["actions[0].type", "'s0'", "click"]),
    "duplicate_ids": (json.dumps({"workflow_id": "wf", "actions": [
        {"action_id": "s0", "type": "click"}, {"action_id": "s0", "type": "click"}]}),
        ["actions[1].action_id 's0' is not unique (also actions[0])"]),
    "missing_parameters": (json.dumps({"workflow_id": "wf", "actions": [
        {"action_id": "s0", "type": "click"}, {"action_id": "s1", "type": "type"}]}),
        ["actions[1] (action_id 's1')", "parameters.text"]),
    "no_actions": (json.dumps({"workflow_id": "wf"}), ["actions", "Field required"]),
    # Routed, it would be an invalid index: clicked in the middle of all the screens.
    "monitor_out_of_range": (json.dumps({"workflow_id": "wf", "actions": [
        {"action_id": "s0", "type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.5},
         "monitor_index": 16}]}),
        ["actions[0].monitor_index (action_id 's0')", "less than 16"]),
}


def test_malformed_workflow_files_are_refused_pointing_at_the_field(
        system: System, tmp_path: Path) -> None:
    """``workflow check`` and ``replay start`` refuse each malformed file with a message
    naming the file and the field (and the action id), exit non-zero, and start nothing."""
    runs = []
    for name, (content, _) in BAD_WORKFLOWS.items():
        path = tmp_path / f"{name}.json"
        path.write_text(content)
        runs += [(name, ("workflow", "check", str(path))),
                 (name, ("replay", "start", str(path), "--machine-id", "M1"))]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda run: cli(system, *run[1]), runs))
    for (name, argv), out in zip(runs, results, strict=True):
        assert out.returncode == 1, (argv, out)
        assert out.stdout == "" and out.stderr.startswith(f"error: {tmp_path}/{name}.json")
        for needle in BAD_WORKFLOWS[name][1]:
            assert needle in out.stderr, (argv, needle, out.stderr)
    # A file that validates but that the dispatcher refuses: the whole workflow, not half.
    reserved = tmp_path / "reserved.json"
    reserved.write_text(json.dumps({"workflow_id": "wf", "actions": [
        {"action_id": "s0", "type": "click"}, {"action_id": "s0_retry1", "type": "click"}]}))
    out = cli(system, "replay", "start", str(reserved), "--machine-id", "M1", "--json")
    assert out.returncode == 1 and json.loads(out.stdout)["error"] == "invalid_workflow"
    assert "s0_retry1: ends with a reserved" in out.stderr, out.stderr
    replays = system.call("dispatcher", GetReplayStatus())
    assert isinstance(replays, ReplayStatusReply) and replays.replays == []


@pytest.mark.parametrize("command", ["status", "pause", "resume", "cancel"])
def test_control_commands_on_an_unknown_replay_fail_clearly(
        system: System, command: str) -> None:
    """``replay status|pause|resume|cancel`` of an id that does not exist: exit 1, a
    readable ``not_found`` on stderr, and the same as JSON on stdout with --json."""
    text, as_json = (cli(system, "replay", command, "r-404", *flags) for flags in ((),
                                                                                   ("--json",)))
    assert text.returncode == as_json.returncode == 1, (text, as_json)
    assert "error: not_found: no replay r-404" in text.stderr and text.stdout == ""
    assert json.loads(as_json.stdout) == {"error": "not_found", "message": "no replay r-404",
                                          "detail": {"replay_id": "r-404"}}


def test_refused_control_commands_never_change_state(frozen: Frozen) -> None:
    """Resume without the required checks (``required_checks_missing`` + the missing ids),
    with an id that is no check of this pause, of a running replay (``not_paused``); pause
    of a paused replay and pause/cancel/resume of a finished one (``not_running`` /
    ``not_paused``): each refused, exit 1, nothing moved. Then the right resume works."""
    system, paused, busy = frozen.system, frozen.paused, frozen.busy
    done = system.start(workflow(*clicks(1), workflow_id="wf-done"), "M1",
                        session_id="other")
    system.wait_status(done, "completed")
    frozen.before = frozen.state()
    refusals = [
        ((paused,), "required_checks_missing", ["missing: allergy, identity"]),
        ((paused, "--ack", "allergy"), "required_checks_missing", ["missing: identity"]),
        ((paused, "--ack", "note"), "required_checks_missing", ["missing: allergy, identity"]),
        ((paused, "--ack", "allergy", "--ack", "identity", "--ack", "oxygen"),
         "unknown_check_ids", ["ids: oxygen"]),
        ((busy,), "not_paused", ["status: running"]),
        ((done,), "not_paused", ["status: completed"]),
    ]
    commands = [(("resume", *args), code, lines) for args, code, lines in refusals] + [
        (("pause", paused), "not_running", ["status: paused_need_help"]),
        (("pause", done), "not_running", ["status: completed"]),
        (("cancel", done), "not_running", ["status: completed"]),
    ]
    for argv, code, lines in commands:
        out = cli(system, "replay", *argv, "--operator", "ide-jour")
        assert out.returncode == 1, (argv, out)
        assert out.stderr.startswith(f"error: {code}: "), (argv, out.stderr)
        for line in lines:
            assert f"  {line}\n" in out.stderr, (argv, line, out.stderr)
        frozen.assert_unchanged(" ".join(argv))
    out = cli(system, "replay", "resume", paused, "--ack", "allergy", "--ack", "identity",
              "--operator", "ide-jour")
    assert out.returncode == 0 and "resumed" in out.stdout, out
    s = system.wait_status(paused, "completed")
    assert s.completed_actions == 3


def test_a_pause_sent_twice_with_one_envelope_id_is_applied_once(frozen: Frozen) -> None:
    """A client's retry (Lazy Pirate: same envelope id) or a copy the broker kept while the
    dispatcher restarted gets the first answer again, not ``not_running``, and the pause is
    not applied twice (counted once, same ``updated_at``)."""
    system, busy = frozen.system, frozen.busy
    payload = encode(PauseReplay(replay_id=busy, operator="ide-jour"), "pause-once-1")
    first, again = (decode(system.client.raw("dispatcher", payload, timeout_s=5.0)[0])
                    for _ in range(2))
    assert first.id == again.id == "pause-once-1"
    assert isinstance(first.body, Ack) and first.body.status == "paused", first.body
    assert again.body == first.body
    s = assert_server_invariants(system, busy)
    # s0 waited in the frozen agent, never granted: the pause took it back.
    assert (s.status, s.current_action_id, s.counters.get("pauses")) == (PAUSED, None, 1)
    frozen.before = frozen.state()
    assert isinstance(decode(system.client.raw("dispatcher", payload, timeout_s=5.0)[0]).body,
                      Ack)
    frozen.assert_unchanged("a third copy of the pause")
