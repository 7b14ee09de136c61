"""The bench agent's messages, built and read without pydantic (bench/bench_agent.py).

Bench agents stand in for workstations but share the tree's two cores, so what they spend
per step counts against the tree. The few messages of a step are packed from plain dicts laid
out as the models serialize them (every field, in declaration order), and the dispatcher's
messages are read as plain maps. :func:`check_wire` proves at start that each message built
here is byte-identical to what ``messages.codec.encode`` makes of the model, and that what is
read here is what ``messages.codec.decode`` reads: a change of the models fails the bench at
once instead of skewing it. The tree itself still validates everything the agents send.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import msgpack  # noqa: E402

from agent.protocol.reports import readdress as agent_readdress  # noqa: E402
from messages.codec import PROTOCOL_VERSION, decode, encode  # noqa: E402
from messages.control import ErrorReply  # noqa: E402
from messages.dispatch import (  # noqa: E402
    ActionReceived,
    ActionReport,
    AgentHello,
    ClaimAttempt,
    ClaimReply,
    DispatchAction,
    DispatchMeta,
    ReportAck,
)
from messages.workflow import INPUT_TYPES, Action  # noqa: E402
from transport import mdp  # noqa: E402

_packer = msgpack.Packer(use_bin_type=True)  # one process, one thread: one Packer
ALREADY_EXECUTED = "already_executed"  # agent.protocol.reports.readdress's warning


@dataclass(frozen=True, slots=True)
class Dispatch:
    """What a bench agent needs of a DispatchAction."""

    msg_id: str
    replay_id: str
    session_id: str
    machine_id: str
    action_id: str
    action_type: str
    attempt_id: str

    @property
    def is_input(self) -> bool:
        """Claimed from the dispatcher before it runs (agent/protocol/serve.py)."""
        return self.action_type in INPUT_TYPES

    @classmethod
    def of(cls, msg_id: str, d: DispatchAction) -> Dispatch:
        return cls(msg_id, d.replay_id, d.session_id, d.machine_id, d.action.action_id,
                   d.action.type, d.attempt_id)


def envelope(type_name: str, msg_id: str, body: dict[str, Any]) -> bytes:
    """``messages.codec.encode`` of a body already in its serialized form."""
    data: bytes = _packer.pack({"v": PROTOCOL_VERSION, "type": type_name, "id": msg_id,
                                "body": body})
    return data


def received(d: Dispatch) -> bytes:
    """The ActionReceived answering ``d`` (same envelope id)."""
    return envelope("action.received", d.msg_id,
                    {"action_id": d.action_id, "attempt_id": d.attempt_id})


def report_body(d: Dispatch, executed_at: float) -> dict[str, Any]:
    """An ActionReport of success, as agent.protocol.reports.build_report makes it of a no-op."""
    # In the model's order: its outcome's fields (messages.dispatch.Outcome), then its own.
    return {"success": True, "error": None, "warning": None,
            "screenshot_before": None, "screenshot_after": None, "actual_position": None,
            "resolution_method": None, "resolution_score": None,
            "resolution_elapsed_ms": None, "resolution_box": None, "target_description": None,
            "target_spec": None,
            "correction": None, "system_dialog": None, "needs_human": False,
            "replay_id": d.replay_id, "session_id": d.session_id,
            "machine_id": d.machine_id, "action_id": d.action_id,
            "attempt_id": d.attempt_id, "executed_at": executed_at}


def readdress(body: dict[str, Any], d: Dispatch) -> dict[str, Any]:
    """agent.protocol.reports.readdress of a success report to the re-delivery ``d``."""
    if (d.attempt_id, d.action_id) == (body["attempt_id"], body["action_id"]):
        return body
    return {**body, "replay_id": d.replay_id, "session_id": d.session_id,
            "machine_id": d.machine_id, "action_id": d.action_id,
            "attempt_id": d.attempt_id, "warning": ALREADY_EXECUTED}


def claim(d: Dispatch, machine_id: str, msg_id: str) -> bytes:
    return envelope("action.claim", msg_id, {
        "replay_id": d.replay_id, "machine_id": machine_id, "action_id": d.action_id,
        "attempt_id": d.attempt_id})


def hello(machine_id: str, instance_id: str, msg_id: str) -> bytes:
    return envelope("agent.hello", msg_id, {"machine_id": machine_id,
                                            "instance_id": instance_id, "pid": 0,
                                            "holding": []})


Read = tuple[str, str, dict[str, Any]]
"""(type, envelope id, body) of a message read as a plain map."""


def read(data: bytes) -> Read | None:
    """The envelope in ``data``; None if it is not one (the caller decodes it properly)."""
    try:
        obj = msgpack.unpackb(data)
    except Exception:  # msgpack raises several unrelated types on bad input
        return None
    if type(obj) is not dict:
        return None
    kind, msg_id, body = obj.get("type"), obj.get("id"), obj.get("body")
    if type(kind) is not str or type(msg_id) is not str or type(body) is not dict:
        return None
    return kind, msg_id, body


def read_dispatch(msg_id: str, body: dict[str, Any]) -> Dispatch | None:
    """The Dispatch in the body of an ``action.dispatch``; None if fields are missing."""
    try:
        action = body["action"]
        return Dispatch(msg_id, body["replay_id"], body["session_id"], body["machine_id"],
                        action["action_id"], action["type"], body["attempt_id"])
    except (KeyError, TypeError):
        return None


def reply_of(frames: list[bytes]) -> Read | None:
    """The message of a FINAL broker → client reply; None for anything else."""
    if len(frames) < 4 or frames[0] != mdp.CLIENT or frames[1] != mdp.C_FINAL:
        return None
    return read(frames[3])


class WireMismatch(RuntimeError):
    """A message built here is not what the real encoder makes of its model."""


def check_wire() -> None:
    """Raise WireMismatch unless the fast messages equal the codec's, both ways."""
    ids = {k: k * 32 for k in "abcdefm"}
    meta = DispatchMeta(first_dispatched_at=1.0)
    model = DispatchAction(
        replay_id=ids["a"], session_id=ids["b"], machine_id="bench-x", attempt_id=ids["c"],
        action=Action.model_validate({"action_id": "s1", "type": "click",
                                      "target_spec": {"x_pct": 0.5, "y_pct": 0.5}}),
        dispatch_meta=meta)
    again = model.model_copy(update={"attempt_id": ids["d"], "action": Action.model_validate(
        {"action_id": "s2", "type": "wait", "parameters": {"duration_ms": 0}})})
    got = read(encode(model, ids["m"]))
    d = read_dispatch(got[1], got[2]) if got is not None else None
    d2 = Dispatch.of(ids["m"], again)
    report = ActionReport(replay_id=ids["a"], session_id=ids["b"], machine_id="bench-x",
                          action_id="s1", attempt_id=ids["c"], success=True,
                          executed_at=1.5)
    pairs: list[tuple[str, bytes, bytes]] = []
    if d != Dispatch.of(ids["m"], model):
        raise WireMismatch(f"dispatch read as {d}")
    assert d is not None
    pairs += [
        ("ActionReceived", received(d),
         encode(ActionReceived(action_id="s1", attempt_id=ids["c"]), ids["m"])),
        ("ActionReport", envelope("action.report", ids["e"], report_body(d, 1.5)),
         encode(report, ids["e"])),
        ("readdressed ActionReport",
         envelope("action.report", ids["e"], readdress(report_body(d, 1.5), d2)),
         encode(agent_readdress(report, again), ids["e"])),
        ("ClaimAttempt", claim(d, "bench-x", ids["f"]),
         encode(ClaimAttempt(replay_id=ids["a"], machine_id="bench-x", action_id="s1",
                             attempt_id=ids["c"]), ids["f"])),
        ("AgentHello", hello("bench-x", ids["b"], ids["f"]),
         encode(AgentHello(machine_id="bench-x", instance_id=ids["b"], pid=0), ids["f"])),
    ]
    for name, ours, real in pairs:
        if ours != real:
            raise WireMismatch(f"{name}: {ours!r} != {real!r}")
    for reply in (ReportAck(action_id="s1", attempt_id=ids["c"], status="accepted"),
                  ClaimReply(granted=True),
                  ClaimReply(granted=False, reason="verdict_pending", retry_in_s=0.005),
                  ErrorReply(code="unsupported_type", message="x")):
        data = encode(reply, ids["m"])
        seen = reply_of([mdp.CLIENT, mdp.C_FINAL, b"dispatcher", data])
        real_body = decode(data).body.model_dump()
        if seen != (reply.type_name, ids["m"], real_body):
            raise WireMismatch(f"{reply!r} read as {seen}")
