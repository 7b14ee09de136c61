"""The safety_checks actor as a real process (``python -m actors safety_checks``) behind a real
broker, asked with BuildPausePayload, its model a real HTTP server on 127.0.0.1 answering
like Ollama (cli/ollama_stub.py): every answer and failure, the kill switch, the timeout
that holds while the actor keeps serving, and bad requests."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from cli.ollama_stub import GOOD_CHECKS, OllamaStub
from messages import ErrorReply, Pong, decode, encode, events
from messages.control import Ping
from messages.events import Event
from messages.safety_checks import BuildPausePayload, PausePayload, ReplayContext
from messages.workflow import Action
from tests.conftest import ROOT, free_port, python_argv, wait_until
from tests.integration.probes import serves
from transport import mdp
from transport.bus import Subscriber
from transport.client import CallFailed, SyncClient
from workflow.safety_rules import LLM_UNAVAILABLE_CHECK_ID

SCREEN = b"\x89PNG\r\n\x1a\n" + b"screen" * 50
SERVICE = "safety_checks"


def request(level: str | None = "medical_critical", screen: bytes | None = SCREEN,
            replay_id: str = "r1") -> BuildPausePayload:
    params: dict[str, Any] = {"message": "Vérifiez le patient avant l'enregistrement.",
                              "safety_checks": [{"id": "chk_identity",
                                                 "label": "Identité du patient vérifiée"}]}
    if level:
        params["safety_level"] = level
    action = Action.model_validate({"action_id": "step_check", "type": "pause_for_human",
                                    "parameters": params})
    return BuildPausePayload(
        replay_id=replay_id, session_id="s1", machine_id="PC-1", mode="supervised",
        action=action, last_screenshot=screen,
        context=ReplayContext(workflow_id="admission_note", index=6, total=9))


@dataclass
class Tree:
    """A broker and one safety_checks actor, with a client and a bus tap."""

    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]]
    client: SyncClient
    sub: Subscriber
    ctx: zmq.Context[Any]

    def build(self, msg: BuildPausePayload, timeout_s: float = 10.0) -> PausePayload:
        reply = self.client.call(SERVICE, msg, timeout_s=timeout_s, retries=0).body
        assert isinstance(reply, PausePayload), reply
        return reply

    def events(self, topic: str, replay_id: str, timeout: float = 5.0) -> Event:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self.sub.recv(timeout_s=0.2)
            if event is not None and event.topic == topic and (
                    event.data.get("replay_id") == replay_id):
                return event
        pytest.fail(f"no {topic} for {replay_id} within {timeout} s")


def bus_reaches_us(client: SyncClient, sub: Subscriber) -> bool:
    """Whether an event of the actor reaches our subscriber: its subscription has gone up
    through the broker to the actor's publisher (until then an event is dropped, as PUB/SUB
    does). A body that is not msgpack is answered with an error and a lea:bad_message."""
    with contextlib.suppress(CallFailed):  # asked again by wait_until
        client.raw(SERVICE, b"\xc1", timeout_s=1.0, retries=0)
    while (event := sub.recv(timeout_s=0.2)) is not None:
        if event.topic == events.BAD_MESSAGE and event.source == SERVICE:
            return True
    return False


@contextlib.contextmanager
def tree(tmp: Path, **extra_env: str) -> Iterator[Tree]:
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("RPA_SAFETY_CHECKS_") or name == "OLLAMA_URL":
            del env[name]
    env.update(
        LEA_MDP_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
        LEA_BUS_IN_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
        LEA_BUS_OUT_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
        LEA_DATA_DIR=str(tmp / "var"), LEA_HEARTBEAT_INTERVAL_MS="250",
        LEA_HEARTBEAT_LIVENESS="3", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **extra_env)
    procs: list[subprocess.Popen[bytes]] = []
    ctx: zmq.Context[Any] = zmq.Context()
    for name, argv in (("broker", ["-m", "broker"]), (SERVICE, ["-m", "actors", SERVICE])):
        with open(tmp / f"{name}.log", "wb") as log:
            procs.append(subprocess.Popen(python_argv(*argv), env=env, cwd=ROOT, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
    client = SyncClient(env["LEA_MDP_ENDPOINT"], ctx)
    sub = Subscriber(ctx, env["LEA_BUS_OUT_ENDPOINT"], "lea:")
    try:
        wait_until(lambda: serves(client, SERVICE), timeout=20)
        wait_until(lambda: bus_reaches_us(client, sub), timeout=20)
        yield Tree(env, procs, client, sub, ctx)
        assert procs[1].poll() is None, "the actor died"
    finally:
        client.close()
        sub.close()
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        ctx.term()


@pytest.fixture(scope="module")
def stub() -> Iterator[OllamaStub]:
    with OllamaStub("good") as server:
        yield server


@pytest.fixture(scope="module")
def shared(stub: OllamaStub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    """One actor for the cases that differ only by the model's behaviour (timeout 1.5 s)."""
    with tree(tmp_path_factory.mktemp("safety"), OLLAMA_URL=stub.url,
              RPA_SAFETY_CHECKS_LLM_TIMEOUT_S="1.5") as t:
        yield t


@pytest.fixture
def fresh(stub: OllamaStub) -> OllamaStub:
    stub.set("good", delay_s=10.0, interval_s=0.05, checks=list(GOOD_CHECKS))
    with stub._lock:
        stub.requests.clear()
    return stub


def test_a_good_answer_gives_contextual_checks_with_evidence(shared: Tree, fresh: OllamaStub
                                                             ) -> None:
    p = shared.build(request(replay_id="good"))
    assert [(c.id, c.source, c.required) for c in p.checks] == [
        ("chk_identity", "declarative", True), ("llm_1", "llm_contextual", False),
        ("llm_2", "llm_contextual", False)]
    assert [c.evidence for c in p.checks[1:]] == [g["evidence"] for g in GOOD_CHECKS]
    assert p.llm is not None and p.llm.raw_answer and p.llm.prompt
    (sent,) = fresh.received()
    assert sent["format"]["properties"]["additional_checks"]["type"] == "array"
    assert sent["images"] == [base64.b64encode(SCREEN).decode()] and sent["stream"] is False
    generated = shared.events(events.SAFETY_CHECKS_GENERATED, "good")
    assert (generated.data["count"], generated.data["sources"]) == (
        3, ["declarative", "llm_contextual", "llm_contextual"])


@pytest.mark.parametrize(("mode", "cause"), [
    ("http_500", "http_error"), ("non_json", "invalid_json"), ("bad_body", "invalid_response"),
    ("schema", "schema_violation"), ("trickle", "timeout"), ("hang", "timeout"),
])
def test_each_failure_still_answers_with_the_declared_checks(
        shared: Tree, fresh: OllamaStub, mode: str, cause: str) -> None:
    fresh.set(mode)
    p = shared.build(request(replay_id=mode))
    assert [c.id for c in p.checks] == ["chk_identity"]
    assert p.llm_status == "failed" and p.llm is not None and p.llm.error == cause
    failed = shared.events(events.SAFETY_CHECKS_LLM_FAILED, mode)
    assert (failed.data["cause"], failed.data["fail_mode"]) == (cause, "open")
    assert shared.events(events.SAFETY_CHECKS_GENERATED, mode).data["sources"] == [
        "declarative"]


@pytest.mark.parametrize(("mode", "labels"), [
    ("many", [f"Vérification contextuelle {i}" for i in (1, 2, 3)]),
    ("repeat_declared", [GOOD_CHECKS[0]["label"]]),
])
def test_the_model_adds_at_most_three_checks_and_never_a_declared_one(
        shared: Tree, fresh: OllamaStub, mode: str, labels: list[str]) -> None:
    fresh.set(mode)
    p = shared.build(request(replay_id=mode))
    assert [c.label for c in p.checks[1:]] == labels
    assert all(c.source == "llm_contextual" and not c.required for c in p.checks[1:])


def test_no_model_call_below_medical_critical(shared: Tree, fresh: OllamaStub) -> None:
    for level in (None, "standard"):
        p = shared.build(request(level, replay_id=f"level-{level}"))
        assert [c.id for c in p.checks] == ["chk_identity"] and p.llm_status == "not_requested"
    assert fresh.requests == []


def test_the_actor_stays_alive_while_the_model_thinks(shared: Tree, fresh: OllamaStub) -> None:
    """The model's wait is off the actor's loop: its heartbeats go on, so the broker never
    drops it mid-call (heartbeat expiry here is 0.75 s, each call 1.5 s) and never hands
    the request to it a second time; requests are served one after the other (MDP)."""
    fresh.set("slow", delay_s=5.0)
    sock = shared.ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(shared.env["LEA_MDP_ENDPOINT"])
    try:
        for rid in ("slow-a", "slow-b"):
            sock.send_multipart(mdp.client_request(SERVICE.encode(),
                                                   encode(request(replay_id=rid), rid)))
        answered: list[str] = []
        alive = 0
        while len(answered) < 2:
            assert shared.client.raw("mmi.service", SERVICE.encode(), timeout_s=2.0) == [
                b"200"], f"the broker lost the actor after {answered}"
            alive += 1
            if sock.poll(100):
                envelope = decode(sock.recv_multipart()[3])
                assert isinstance(envelope.body, PausePayload)
                assert envelope.body.llm is not None and envelope.body.llm.error == "timeout"
                answered.append(envelope.id)
        assert answered == ["slow-a", "slow-b"] and alive > 10
        assert len(fresh.received()) == 2  # neither was handed out twice
    finally:
        sock.close()


def test_malformed_requests_get_an_error_and_the_actor_goes_on(shared: Tree) -> None:
    good = request(replay_id="after-bad")
    body = good.model_dump(mode="python")
    click = dict(body, action={"action_id": "c", "type": "click"})
    bad_bodies = [
        msgpack.packb({"v": 1, "type": BuildPausePayload.type_name, "id": "a",
                       "body": click}),
        msgpack.packb({"v": 1, "type": BuildPausePayload.type_name, "id": "b",
                       "body": dict(body, last_screenshot=12345)}),
        msgpack.packb({"v": 1, "type": BuildPausePayload.type_name, "id": "c",
                       "body": dict(body, context={"workflow_id": "", "index": -1})}),
        msgpack.packb({"v": 1, "type": BuildPausePayload.type_name, "id": "d",
                       "body": {k: v for k, v in body.items() if k != "action"}}),
        msgpack.packb({"v": 1, "type": PausePayload.type_name, "id": "e",
                       "body": {"message": "x"}}),
        b"\xc1garbage",
    ]
    sock = shared.ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(shared.env["LEA_MDP_ENDPOINT"])
    try:
        for data in bad_bodies:
            sock.send_multipart(mdp.client_request(SERVICE.encode(), data))
        codes = []
        for _ in bad_bodies:
            assert sock.poll(10_000)
            reply = decode(sock.recv_multipart()[3]).body
            assert isinstance(reply, ErrorReply)
            codes.append(reply.code)
        assert codes.count("bad_message") == 5 and codes.count("unsupported_type") == 1
    finally:
        sock.close()
    assert isinstance(shared.client.call(SERVICE, Ping()).body, Pong)
    assert shared.build(good).checks[0].id == "chk_identity"


def test_the_timeout_holds_with_the_spec_default(tmp_path: Path) -> None:
    """RPA_SAFETY_CHECKS_LLM_TIMEOUT_S unset (5 s) and a model that would take 20 s: the
    answer, without contextual checks, comes within timeout + 1 s."""
    with OllamaStub("slow", delay_s=20.0) as stub, tree(tmp_path, OLLAMA_URL=stub.url) as t:
        started = time.monotonic()
        p = t.build(request(replay_id="default-timeout"), timeout_s=15.0)
        waited = time.monotonic() - started
        assert p.llm is not None and p.llm.error == "timeout"
        assert p.llm.error_detail == "no complete answer within 5.0 s"
        assert waited < 5.0 + 1.0, f"answered after {waited:.1f} s"
        assert len(stub.received()) == 1


def test_kill_switch_no_request_reaches_the_model(tmp_path: Path) -> None:
    with OllamaStub("good") as stub, tree(tmp_path, OLLAMA_URL=stub.url,
                                          RPA_SAFETY_CHECKS_LLM_ENABLED="0") as t:
        p = t.build(request(replay_id="killed"))
        assert [c.id for c in p.checks] == ["chk_identity"]
        assert (p.llm_status, p.llm) == ("disabled", None)
        generated = t.events(events.SAFETY_CHECKS_GENERATED, "killed")
        assert generated.data["llm_status"] == "disabled"
        assert stub.requests == []


def test_closed_fail_mode_with_no_server_listening(tmp_path: Path) -> None:
    """Connection refused, fail mode closed: one required system check says the screen was
    not looked at, so the person cannot continue without knowing it."""
    with tree(tmp_path, OLLAMA_URL=f"http://127.0.0.1:{free_port()}",
              RPA_SAFETY_CHECKS_LLM_FAIL_MODE="closed") as t:
        p = t.build(request(replay_id="closed"))
        assert [(c.id, c.source, c.required) for c in p.checks] == [
            ("chk_identity", "declarative", True), (LLM_UNAVAILABLE_CHECK_ID, "system", True)]
        failed = t.events(events.SAFETY_CHECKS_LLM_FAILED, "closed")
        assert (failed.data["cause"], failed.data["fail_mode"]) == ("unreachable", "closed")
