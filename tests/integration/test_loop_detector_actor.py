"""The loop_detector actor as a real process behind a real broker, called like the
dispatcher calls it: ObserveStep sequences, bad input of every kind, the kill switch, an
embedder that cannot load, and the bus events it publishes."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import zmq
from PIL import Image, ImageDraw

from messages import ErrorReply, Event, Pong, decode, encode, events
from messages.control import Ping
from messages.loop import ForgetReplay, LoopVerdict, ObserveStep
from messages.replay import Ack
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import serves
from transport import mdp
from transport.bus import Subscriber
from transport.client import CallFailed, SyncClient


def screen(text: str) -> bytes:
    image = Image.new("RGB", (640, 400), (236, 239, 244))
    draw = ImageDraw.Draw(image)
    draw.rectangle((40, 120, 600, 160), fill=(255, 255, 255), outline=(90, 90, 90))
    draw.text((48, 130), text, fill=(0, 0, 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def step(i: int, shot: bytes | None, replay: str = "r1", **fields: Any) -> ObserveStep:
    values: dict[str, Any] = {
        "replay_id": replay, "session_id": "s1", "action_id": f"a{i}",
        "base_action_id": f"a{i}", "action_type": "click", "target": {"by_text": f"b{i}"},
        "success": True, "screenshot_after": shot}
    values.update(fields)
    return ObserveStep.model_validate(values)


class Detector:
    """A broker and one loop_detector process; a client and a bus subscriber."""

    def __init__(self, spawn: Spawn, env: dict[str, str], **rpa: str) -> None:
        self.env = dict(env, **rpa)
        spawn(python_argv("-m", "broker"), env=self.env, name="broker")
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.bus = Subscriber(self.ctx, self.env["LEA_BUS_OUT_ENDPOINT"])
        self.proc = spawn(python_argv("-m", "actors", "loop_detector"), env=self.env,
                          name="loop_detector")
        self.client = SyncClient(self.env["LEA_MDP_ENDPOINT"], self.ctx)
        wait_until(lambda: serves(self.client, "loop_detector"), timeout=20)

    def observe(self, s: ObserveStep) -> LoopVerdict:
        reply = self.client.call("loop_detector", s, timeout_s=5.0).body
        assert isinstance(reply, LoopVerdict), reply
        return reply

    def bus_ready(self) -> None:
        """Until the actor's events reach us (a subscriber joins late): refuse a truncated
        screenshot, which changes nothing, until its lea:bad_message arrives."""
        probe = step(0, screen("probe")[:100], replay="bus-probe")

        def seen() -> bool:
            with pytest.raises(CallFailed):
                self.client.call("loop_detector", probe, retries=0)
            got = self.bus.recv(timeout_s=0.2)
            return got is not None and got.data.get("replay_id") == "bus-probe"

        wait_until(seen, timeout=20)
        while self.bus.recv(timeout_s=0.1) is not None:
            pass

    def event(self, topic: str, timeout: float = 10.0) -> Event:
        found: list[Event] = []

        def seen() -> bool:
            got = self.bus.recv(timeout_s=0.05)
            if got is not None and got.topic == topic:
                found.append(got)
            return bool(found)

        wait_until(seen, timeout=timeout)
        return found[0]

    def close(self) -> None:
        self.client.close()
        self.bus.close()
        self.ctx.term()


@pytest.fixture
def detector(spawn: Spawn, lea_env: dict[str, str]) -> Iterator[Detector]:
    d = Detector(spawn, lea_env)
    yield d
    d.close()


def test_stuck_screen_and_progress_through_the_broker(detector: Detector) -> None:
    detector.bus_ready()
    same = screen("Dupont")
    out = [detector.observe(step(i, same)) for i in range(4)]
    assert [v.detected for v in out] == [False, False, False, True]
    assert out[3].signal == "screen_static" and out[3].reason == "loop_detected"
    assert out[3].pause_message().startswith("Léa semble bloquée — screen_static (captures=4")
    event = detector.event(events.LOOP_DETECTED)
    assert event.source == "loop_detector"
    assert event.data["replay_id"] == "r1" and event.data["signal"] == "screen_static"
    assert event.data["evidence"] == out[3].evidence and event.data["action_id"] == "a3"
    # Another replay that progresses, interleaved with a third that repeats an action.
    for i in range(8):
        assert not detector.observe(step(i, screen("Dupont Jean"[:i + 2]), "r2")).detected
        verdict = detector.observe(step(i, None, "r3", target={"by_text": "Valider"}))
        assert verdict.detected == (i in (2, 5)), (i, verdict)  # fresh runs after each
    failing = step(9, None, "r4", success=False, error="target_not_found", retry_count=3)
    assert detector.observe(failing).signal == "retry_threshold"
    forgotten = detector.client.call("loop_detector", ForgetReplay(replay_id="r1")).body
    assert isinstance(forgotten, Ack) and forgotten.status == "forgotten"
    again = detector.client.call("loop_detector", ForgetReplay(replay_id="r1")).body
    assert isinstance(again, Ack) and again.status == "unknown"


def test_bad_input_gets_an_error_and_the_actor_serves_on(detector: Detector) -> None:
    detector.bus_ready()
    good = screen("Dupont")
    with pytest.raises(CallFailed) as refused:
        detector.client.call("loop_detector", step(0, good[:200]))  # a truncated PNG
    assert refused.value.code == "invalid_screenshot"
    assert refused.value.detail == {"replay_id": "r1", "action_id": "a0"}
    bad = detector.event(events.BAD_MESSAGE)
    assert bad.data["reason"] == "invalid_screenshot"
    body = step(0, good).model_dump(mode="python")
    malformed: list[dict[str, Any]] = [
        dict(body, screenshot_after=b"GIF89a" + b"\x00" * 32),
        dict(body, action_type="teleport"),
        dict(body, retry_count=-1),
        dict(body, replay_id=""),
        dict(body, success="maybe"),
        dict(body, surprise=1),
        {k: v for k, v in body.items() if k != "success"},
        {"replay_id": 42},
    ]
    sock = detector.ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(detector.env["LEA_MDP_ENDPOINT"])
    for broken in malformed:
        frame = msgpack.packb({"v": 1, "type": "loop.observe", "id": "x", "body": broken},
                              use_bin_type=True)
        sock.send_multipart(mdp.client_request(b"loop_detector", frame))
        assert sock.poll(5000), broken
        reply = decode(sock.recv_multipart()[3]).body
        assert isinstance(reply, ErrorReply) and reply.code == "bad_message", (broken, reply)
    sock.send_multipart(mdp.client_request(b"loop_detector", b"\xc1not msgpack"))
    assert sock.poll(5000)
    assert isinstance(decode(sock.recv_multipart()[3]).body, ErrorReply)
    sock.close()
    # Nothing was half-applied: the replay's run starts with the next good capture.
    assert isinstance(detector.client.call("loop_detector", Ping()).body, Pong)
    out = [detector.observe(step(i, good)) for i in range(4)]
    assert [v.detected for v in out] == [False, False, False, True]
    assert detector.proc.poll() is None
    assert decode(encode(out[3])).body == out[3]


def test_kill_switch_answers_without_detecting(spawn: Spawn,
                                               lea_env: dict[str, str]) -> None:
    d = Detector(spawn, lea_env, RPA_LOOP_DETECTOR_ENABLED="0")
    try:
        same = screen("Dupont")
        out = [d.observe(step(i, same, target={"by_text": "OK"}, success=i % 2 == 0,
                              retry_count=9)) for i in range(8)]
        assert not any(v.detected for v in out)
        assert out[0].evidence == {"enabled": False}
    finally:
        d.close()


def test_missing_clip_checkpoint_disables_screen_static_only(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Any) -> None:
    d = Detector(spawn, lea_env, RPA_LOOP_EMBEDDER="clip",
                 RPA_LOOP_CLIP_PRETRAINED=str(tmp_path / "missing.pt"))
    try:
        event = d.event(events.LOOP_EMBEDDER_UNAVAILABLE)
        assert event.data["embedder"] == "clip"
        assert event.data["effect"] == "screen_static disabled"
        assert "missing.pt" in event.data["error"]
        same = screen("Dupont")
        assert not any(d.observe(step(i, same)).detected for i in range(6))
        repeat = [d.observe(step(10 + i, same, target={"by_text": "OK"})) for i in range(3)]
        assert repeat[-1].signal == "action_repeat"
        failing = step(20, same, success=False, error="boom", retry_count=3)
        assert d.observe(failing).signal == "retry_threshold"
    finally:
        d.close()
