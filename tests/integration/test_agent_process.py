"""The agent as a real process behind a real broker (edge cases c, d, g, k and invariants C1-C5
of the transport contract, docs/architecture.md, "The contract's named rules").

The dispatcher here is a plain ``dispatcher`` worker written in the test: it records every
request it gets and answers hellos, and reports only when told to, so the test decides when
a report is "lost". Dispatches go to ``agent.<M>`` from a SyncClient. Exactly-once is proven
by counting the lines of the agent's effects log.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zmq

from agent.effects import read_effects
from messages.base import Message
from messages.codec import decode, encode
from messages.control import ErrorReply, Ping, Pong
from messages.dispatch import (
    ActionReceived,
    ActionReport,
    AgentHello,
    DispatchAction,
    DispatchMeta,
    ReportAck,
)
from messages.replay import Ack
from messages.workflow import Action
from runtime.settings import Settings
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import serves
from transport.client import SyncClient
from transport.worker import Worker

MACHINE = "M1"
SERVICE = f"agent.{MACHINE}"


@dataclass
class Received:
    at: float
    msg_id: str
    body: Message


class FakeDispatcher(threading.Thread):
    """A ``dispatcher`` worker in a thread: records requests; acks reports when ``ack`` is
    set (from the ``ack_from``-th copy of a report on), else "loses" the ack."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(daemon=True)
        self.endpoint = endpoint
        self.ack = True
        self.ack_from = 1
        self._got: list[Received] = []
        self._lock = threading.Lock()
        self._stop_flag = threading.Event()

    def run(self) -> None:
        ctx: zmq.Context[Any] = zmq.Context()
        worker = Worker(ctx, self.endpoint, "dispatcher", heartbeat_interval_s=0.25)
        while not self._stop_flag.is_set():
            if worker.socket.poll(50):
                for request in worker.drain():
                    worker.reply(request, self._answer(request.body[0]))
            worker.tick()
        worker.close()
        ctx.term()

    def _answer(self, data: bytes) -> bytes:
        envelope = decode(data)
        body = envelope.body
        with self._lock:
            self._got.append(Received(time.monotonic(), envelope.id, body))
            copies = sum(1 for r in self._got if isinstance(r.body, ActionReport)
                         and r.msg_id == envelope.id)
        if isinstance(body, AgentHello):
            return encode(Ack(), envelope.id)
        if isinstance(body, ActionReport):
            if self.ack and copies >= self.ack_from:
                return encode(ReportAck(action_id=body.action_id, attempt_id=body.attempt_id,
                                        status="accepted"), envelope.id)
            # A reply the agent cannot match to its request: to it, the ack was lost.
            return encode(Ack(), "lost-" + envelope.id)
        return encode(ErrorReply(code="unsupported_type", message="fake"), envelope.id)

    def stop(self) -> None:
        self._stop_flag.set()
        self.join(5)

    def received(self) -> list[Received]:
        with self._lock:
            return list(self._got)

    def reports(self, action_id: str, attempt_id: str | None = None) -> list[Received]:
        return [r for r in self.received() if isinstance(r.body, ActionReport)
                and r.body.action_id == action_id
                and (attempt_id is None or r.body.attempt_id == attempt_id)]

    def hellos(self) -> list[AgentHello]:
        return [r.body for r in self.received() if isinstance(r.body, AgentHello)]


@dataclass
class System:
    spawn: Spawn
    env: dict[str, str]
    tmp: Path
    dispatcher: FakeDispatcher
    client: SyncClient
    agent: subprocess.Popen[bytes] | None = None
    attempts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def effects_path(self) -> Path:
        return self.tmp / "effects.jsonl"

    def start_agent(self, scenario: dict[str, Any] | None = None) -> subprocess.Popen[bytes]:
        argv = ["-m", "agent", "--machine-id", MACHINE, "--data-dir", str(self.tmp / "agent"),
                "--effects-log", str(self.effects_path)]
        if scenario is not None:
            path = self.tmp / "scenario.json"
            path.write_text(json.dumps(scenario))
            argv += ["--scenario", str(path)]
        hellos = len(self.dispatcher.hellos())
        self.agent = self.spawn(python_argv(*argv), env=self.env, name="agent")
        # Up once its hello arrived: the worker is registered by then.
        wait_until(lambda: len(self.dispatcher.hellos()) > hellos, timeout=20)
        return self.agent

    def kill_agent(self, sig: int = signal.SIGKILL) -> int:
        assert self.agent is not None
        os.kill(self.agent.pid, sig)
        return self.agent.wait(20)

    def dispatch(self, action: dict[str, Any], attempt_id: str | None = None,
                 replay_id: str = "replay_1", supersedes: list[str] | None = None) -> Message:
        d = DispatchAction(
            replay_id=replay_id, session_id="sess_1", machine_id=MACHINE,
            attempt_id=attempt_id or f"att_{next(self.attempts)}",
            dispatch_meta=DispatchMeta(first_dispatched_at=time.time()),
            action=Action.model_validate(action), supersedes=supersedes or [])
        return self.client.call(SERVICE, d, timeout_s=5.0, retries=0).body

    def wait_acked(self) -> None:
        """Until the agent has recorded the ack of every report: a stop before that would
        (rightly) send the unacked ones again after the restart."""
        path = self.tmp / "agent" / "ledger.sqlite3"

        def acked() -> bool:
            with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
                return db.execute("SELECT COUNT(*) FROM actions WHERE outbox IS NOT NULL"
                                  ).fetchone() == (0,)

        wait_until(acked, timeout=20)

    def effects(self, action_id: str) -> list[dict[str, Any]]:
        return [e for e in read_effects(self.effects_path) if e["action_id"] == action_id]


@pytest.fixture
def system(spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> Any:
    endpoint = lea_env["LEA_MDP_ENDPOINT"]
    spawn(python_argv("-m", "broker"), env=lea_env, name="broker")
    # It serves 'dispatcher': only from the tree's own door (broker/tree_door.py).
    door = Settings(data_dir=Path(lea_env["LEA_DATA_DIR"])).tree_mdp_endpoint
    dispatcher = FakeDispatcher(door)
    dispatcher.start()
    client = SyncClient(endpoint)
    wait_until(lambda: serves(client, "dispatcher"),
               timeout=20)
    yield System(spawn, lea_env, tmp_path, dispatcher, client)
    client.close()
    dispatcher.stop()


def click(action_id: str, by_text: str = "Valider") -> dict[str, Any]:
    return {"action_id": action_id, "type": "click", "target_spec": {"by_text": by_text}}


def only(items: list[Received]) -> ActionReport:
    assert len(items) == 1, items
    body = items[0].body
    assert isinstance(body, ActionReport)
    return body


def test_executes_reports_and_answers_a_redelivery_from_the_ledger(system: System) -> None:
    agent = system.start_agent()
    hello = system.dispatcher.hellos()[0]
    assert hello.machine_id == MACHINE and hello.pid == agent.pid

    received = system.dispatch(click("step_1"), "att_a")
    # The receipt names this agent process, as its hello does (the dispatcher's hello rule).
    assert received == ActionReceived(action_id="step_1", attempt_id="att_a",
                                      instance_id=hello.instance_id)
    wait_until(lambda: system.dispatcher.reports("step_1"))
    report = only(system.dispatcher.reports("step_1"))
    assert (report.success, report.error, report.attempt_id) == (True, None, "att_a")
    assert (report.replay_id, report.session_id, report.machine_id) == (
        "replay_1", "sess_1", MACHINE)
    assert report.screenshot_after is not None
    assert report.screenshot_after.startswith(b"\x89PNG")
    assert len(system.effects("step_1")) == 1

    # Case g/k: the same action again (an orphan resend): not executed, original report.
    assert isinstance(system.dispatch(click("step_1"), "att_b"), ActionReceived)
    wait_until(lambda: system.dispatcher.reports("step_1", "att_b"))
    again = only(system.dispatcher.reports("step_1", "att_b"))
    assert (again.success, again.warning) == (True, "already_executed")
    assert again.screenshot_after == report.screenshot_after
    time.sleep(0.5)
    assert len(system.effects("step_1")) == 1
    assert len(system.dispatcher.reports("step_1")) == 2  # acked: no re-sends


def test_the_same_step_in_another_replay_is_executed_again(system: System) -> None:
    # Action ids are stable per workflow step: replaying the workflow again on the same
    # machine sends the same action_id under a new replay_id, a new action to execute.
    system.start_agent()
    assert isinstance(system.dispatch(click("step_1"), "att_a", "replay_1"), ActionReceived)
    wait_until(lambda: system.dispatcher.reports("step_1", "att_a"))
    assert len(system.effects("step_1")) == 1

    assert isinstance(system.dispatch(click("step_1"), "att_b", "replay_2"), ActionReceived)
    wait_until(lambda: system.dispatcher.reports("step_1", "att_b"))
    second = only(system.dispatcher.reports("step_1", "att_b"))
    assert (second.replay_id, second.success, second.error, second.warning) == (
        "replay_2", True, None, None)
    assert [e["attempt_id"] for e in system.effects("step_1")] == ["att_a", "att_b"]

    # A re-delivery within a replay is still answered from the ledger, for either replay,
    # and across a restart of the agent.
    assert isinstance(system.dispatch(click("step_1"), "att_c", "replay_2"), ActionReceived)
    wait_until(lambda: system.dispatcher.reports("step_1", "att_c"))
    again = only(system.dispatcher.reports("step_1", "att_c"))
    assert (again.replay_id, again.success, again.warning) == (
        "replay_2", True, "already_executed")
    system.wait_acked()
    system.kill_agent(signal.SIGTERM)
    system.start_agent()
    assert isinstance(system.dispatch(click("step_1"), "att_d", "replay_1"), ActionReceived)
    wait_until(lambda: system.dispatcher.reports("step_1", "att_d"))
    again = only(system.dispatcher.reports("step_1", "att_d"))
    assert (again.replay_id, again.success, again.warning) == (
        "replay_1", True, "already_executed")
    time.sleep(0.5)
    assert [e["attempt_id"] for e in system.effects("step_1")] == ["att_a", "att_b"]
    # Every report acked once: no re-sends.
    assert len(system.dispatcher.reports("step_1")) == 4


def test_another_replay_of_a_step_in_progress_is_queued_not_merged(system: System) -> None:
    system.start_agent({"actions": {"slow": {"delay_s": 1}}})
    assert isinstance(system.dispatch(click("slow"), "att_1", "replay_1"), ActionReceived)
    assert isinstance(system.dispatch(click("slow"), "att_2", "replay_2"), ActionReceived)
    wait_until(lambda: len(system.dispatcher.reports("slow")) >= 2, timeout=20)
    time.sleep(0.5)
    # Each replay's action executed once and reported to its own attempt.
    first = only(system.dispatcher.reports("slow", "att_1"))
    second = only(system.dispatcher.reports("slow", "att_2"))
    assert (first.replay_id, first.success, first.warning) == ("replay_1", True, None)
    assert (second.replay_id, second.success, second.warning) == ("replay_2", True, None)
    assert [e["attempt_id"] for e in system.effects("slow")] == ["att_1", "att_2"]


def test_redelivery_while_executing_is_not_executed_again(system: System) -> None:
    system.start_agent({"actions": {"slow": {"delay_s": 2}}})
    assert isinstance(system.dispatch(click("slow"), "att_1"), ActionReceived)
    assert isinstance(system.dispatch(click("slow"), "att_2"), ActionReceived)
    # The main loop keeps serving during the long action (C3).
    assert isinstance(system.client.call(SERVICE, Ping(), timeout_s=2.0).body, Pong)
    wait_until(lambda: system.dispatcher.reports("slow"), timeout=20)
    time.sleep(0.5)
    # One execution; its report answers the newest attempt, the current one for the
    # dispatcher (an att_1 report would only be recorded as stale).
    report = only(system.dispatcher.reports("slow"))
    assert (report.attempt_id, report.success, report.warning) == (
        "att_2", True, "already_executed")
    assert len(system.effects("slow")) == 1


def test_malformed_requests_get_an_error_and_the_agent_carries_on(system: System) -> None:
    system.start_agent()
    for body in (b"\x00garbage", b"", encode(Ack())):
        reply = decode(system.client.raw(SERVICE, body, timeout_s=5.0, retries=0)[0]).body
        assert isinstance(reply, ErrorReply)
        assert reply.code in {"bad_message", "unsupported_type"}
    wrong = DispatchAction(
        replay_id="r", session_id="s", machine_id="OTHER", attempt_id="x",
        dispatch_meta=DispatchMeta(first_dispatched_at=0.0),
        action=Action.model_validate(click("step_x")))
    reply = decode(system.client.raw(SERVICE, encode(wrong), timeout_s=5.0,
                                     retries=0)[0]).body
    assert isinstance(reply, ErrorReply) and reply.code == "wrong_machine"
    # A failing action is reported as a failure, never dropped (C1).
    assert isinstance(system.dispatch(click("step_2", by_text="Imprimer")), ActionReceived)
    wait_until(lambda: system.dispatcher.reports("step_2"))
    failed = only(system.dispatcher.reports("step_2"))
    assert (failed.success, failed.error) == (False, "target_not_found")
    assert system.agent is not None and system.agent.poll() is None
    assert system.effects("step_x") == [] and system.effects("step_2") == []


def test_unacked_report_is_retried_with_backoff_until_acked(system: System) -> None:
    system.dispatcher.ack_from = 3  # the first two acks are lost
    system.start_agent()
    system.dispatch(click("step_1"), "att_1")
    wait_until(lambda: len(system.dispatcher.reports("step_1")) >= 3, timeout=30)
    copies = system.dispatcher.reports("step_1")
    assert {c.msg_id for c in copies} == {copies[0].msg_id}  # one report, sent again
    assert {c.body.attempt_id for c in copies if isinstance(c.body, ActionReport)} == {"att_1"}
    # Backoff 1 s then 3 s (only lower bounds, with slack: a slow machine only adds delay).
    gaps = [b.at - a.at for a, b in itertools.pairwise(copies)]
    assert gaps[0] > 0.5 and gaps[1] > 1.5, gaps
    # The third copy was acked: a restarted agent has nothing left to send.
    system.wait_acked()
    system.kill_agent(signal.SIGTERM)
    system.start_agent()
    time.sleep(1.5)
    assert len(system.dispatcher.reports("step_1")) == 3
    assert len(system.effects("step_1")) == 1


def test_unacked_report_survives_an_agent_restart(system: System) -> None:
    system.dispatcher.ack = False
    system.start_agent()
    system.dispatch(click("step_1"), "att_1")
    wait_until(lambda: system.dispatcher.reports("step_1"))
    first = system.dispatcher.reports("step_1")[0]
    assert system.kill_agent() == -signal.SIGKILL
    system.dispatcher.ack = True
    restarted_at = time.monotonic()
    system.start_agent()
    wait_until(lambda: [r for r in system.dispatcher.reports("step_1")
                        if r.at > restarted_at], timeout=20)
    resent = next(r for r in system.dispatcher.reports("step_1") if r.at > restarted_at)
    assert resent.msg_id == first.msg_id and resent.body == first.body
    time.sleep(1.5)  # acked now: no further copies
    assert len([r for r in system.dispatcher.reports("step_1") if r.at > restarted_at]) == 1
    assert len(system.effects("step_1")) == 1


def test_kill_9_during_execution_is_reported_indeterminate_after_restart(
        system: System) -> None:
    system.start_agent({"actions": {"slow_1": {"delay_s": 60}}})
    # ActionReceived from an idle agent means the started mark is on disk.
    assert isinstance(system.dispatch(click("slow_1"), "att_1"), ActionReceived)
    time.sleep(0.3)
    assert system.kill_agent() == -signal.SIGKILL
    assert system.dispatcher.reports("slow_1") == []

    system.start_agent({"actions": {"slow_1": {"delay_s": 60}}})
    wait_until(lambda: system.dispatcher.reports("slow_1"), timeout=20)
    report = only(system.dispatcher.reports("slow_1"))
    assert (report.attempt_id, report.success, report.error, report.needs_human) == (
        "att_1", False, "indeterminate_after_restart", True)

    # Re-delivered: the same verdict for the new attempt, still nothing executed.
    assert isinstance(system.dispatch(click("slow_1"), "att_2"), ActionReceived)
    wait_until(lambda: system.dispatcher.reports("slow_1", "att_2"))
    again = only(system.dispatcher.reports("slow_1", "att_2"))
    assert (again.error, again.needs_human) == ("indeterminate_after_restart", True)
    assert system.effects("slow_1") == []


def test_crash_after_the_input_is_never_executed_twice(system: System) -> None:
    system.start_agent({"actions": {"boom": {"crash": "after"}}})
    assert isinstance(system.dispatch(click("boom"), "att_1"), ActionReceived)
    assert system.agent is not None
    assert system.agent.wait(20) == 97  # the scenario's crash exit code
    assert len(system.effects("boom")) == 1

    system.start_agent()
    wait_until(lambda: system.dispatcher.reports("boom"), timeout=20)
    report = only(system.dispatcher.reports("boom"))
    assert (report.error, report.needs_human) == ("indeterminate_after_restart", True)
    assert isinstance(system.dispatch(click("boom"), "att_2"), ActionReceived)
    wait_until(lambda: system.dispatcher.reports("boom", "att_2"))
    assert len(system.effects("boom")) == 1


# A resume that supersedes the abandoned ids of its step (DispatchAction.supersedes) ----------


def test_a_resume_superseding_an_id_that_ran_is_answered_from_it(system: System) -> None:
    system.start_agent()
    system.dispatch(click("s0"), "att_a")  # the abandoned copy that ran after all
    wait_until(lambda: system.dispatcher.reports("s0", "att_a"))
    for attempt in ("att_r", "att_r2"):  # the resume, then a resend of it
        assert isinstance(system.dispatch(click("s0_resume"), attempt, supersedes=["s0"]),
                          ActionReceived)
        wait_until(lambda a=attempt: system.dispatcher.reports("s0_resume", a))
        answer = only(system.dispatcher.reports("s0_resume", attempt))
        assert (answer.success, answer.warning, answer.replay_id) == (
            True, "already_executed", "replay_1")
    # Another replay's resume of the same step is its own step.
    system.dispatch(click("s0_resume"), "att_x", "replay_2", supersedes=["s0"])
    wait_until(lambda: system.dispatcher.reports("s0_resume", "att_x"))
    assert only(system.dispatcher.reports("s0_resume", "att_x")).warning is None
    time.sleep(0.5)
    assert [e["attempt_id"] for e in read_effects(system.effects_path)] == ["att_a", "att_x"]


def test_a_stale_copy_of_a_superseded_id_is_never_executed(system: System) -> None:
    system.start_agent({"actions": {"s0_resume": {"delay_s": 1.5}}})
    system.dispatch(click("s0_resume"), "att_r", supersedes=["s0", "s0_retry1"])
    system.dispatch(click("s0"), "att_old1")  # while the resume executes: waits, answered
    wait_until(lambda: system.dispatcher.reports("s0_resume"), timeout=20)
    system.dispatch(click("s0_retry1"), "att_old2")  # after it
    wait_until(lambda: system.dispatcher.reports("s0_retry1"), timeout=20)
    system.wait_acked()
    system.kill_agent(signal.SIGTERM)
    system.start_agent()
    system.dispatch(click("s0"), "att_old3")  # and after a restart
    wait_until(lambda: system.dispatcher.reports("s0", "att_old3"), timeout=20)
    time.sleep(0.5)
    assert [e["action_id"] for e in read_effects(system.effects_path)] == ["s0_resume"]
    assert only(system.dispatcher.reports("s0_resume")).warning is None
    for action_id, attempt in (("s0", "att_old1"), ("s0_retry1", "att_old2"),
                               ("s0", "att_old3")):
        answer = only(system.dispatcher.reports(action_id, attempt))
        assert (answer.success, answer.warning) == (True, "already_executed"), answer


def test_a_resume_superseding_an_id_cut_by_a_restart_is_indeterminate(
        system: System) -> None:
    system.start_agent({"actions": {"s0": {"delay_s": 60}}})
    assert isinstance(system.dispatch(click("s0"), "att_1"), ActionReceived)
    time.sleep(0.3)
    system.kill_agent()
    system.start_agent()
    wait_until(lambda: system.dispatcher.reports("s0"), timeout=20)
    system.dispatch(click("s0_resume"), "att_r", supersedes=["s0"])
    wait_until(lambda: system.dispatcher.reports("s0_resume"), timeout=20)
    answer = only(system.dispatcher.reports("s0_resume"))
    assert (answer.success, answer.error, answer.needs_human, answer.warning) == (
        False, "indeterminate_after_restart", True, None)
    time.sleep(0.5)
    assert system.effects("s0") == [] and system.effects("s0_resume") == []
