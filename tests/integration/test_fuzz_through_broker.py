"""Fuzzing through the broker: generated requests to every service of a real tree.

The in-process fuzz (tests/unit/test_fuzz_handlers.py) is where the numbers are; this is the
same kind of inputs (tests/fuzzing.py) sent as a client would send them, through the broker,
to the real processes: the six actors and a simulated agent. Each is answered in time, with
an error for what is not a valid envelope and never with ``internal_error``; afterwards no
process of the tree has restarted and a replay on a fresh agent completes.
(The broker's own MDP framing is fuzzed by tests/integration/test_broker_bad_input.py.)
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
import zmq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from actors import ACTORS
from messages.base import Message
from messages.codec import Envelope, MessageError, decode
from messages.control import ErrorReply
from runtime.settings import Settings
from tests.conftest import Spawn, free_port
from tests.fuzz_targets import build
from tests.fuzzing import Deriver, Pools, frames, structured, unstructured, weighted
from tests.integration.system import System, clicks, workflow
from tests.integration.transport_checks import wait_ready
from transport import mdp

SHORT = 40  # requests per service
LONG = 1500
ANSWER_S = 15.0  # a request not answered within this is a hang (the LLM timeout is 1 s)
MACHINE = "m1"


def _taken(tmp: Path) -> dict[str, list[str]]:
    """The type names each service takes (read from the handlers themselves)."""
    taken: dict[str, list[str]] = {}
    for name in (*ACTORS, "agent"):
        target = build(name, Settings(mdp_endpoint=f"tcp://127.0.0.1:{free_port()}",
                                      bus_in_endpoint=f"tcp://127.0.0.1:{free_port()}",
                                      data_dir=tmp / "probe" / name), tmp / "probe")
        target.close()
        service = f"agent.{MACHINE}" if name == "agent" else name
        taken[service] = sorted(t.type_name for t in target.handled)
    return taken


def _fuzz(system: System, per_service: int, tmp: Path) -> Counter[str]:
    taken = _taken(tmp)
    services = sorted(taken)
    pools = Pools(pinned={"machine_id": [MACHINE]})
    deriver = Deriver(pools)
    anything = weighted((1, structured(deriver)), (1, unstructured()))
    # A REQUEST with no body frame breaks MDP itself: the broker drops it (and says so on
    # the bus, test_broker_bad_input.py); no service ever sees it.
    requests = {s: frames(weighted((3, structured(deriver, taken[s])), (2, anything)),
                          empty=False) for s in services}
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(system.env["LEA_MDP_ENDPOINT"])
    seen: Counter[str] = Counter()

    @settings(max_examples=per_service * len(services), deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(services).flatmap(lambda s: st.tuples(st.just(s), requests[s])))
    def one(request: tuple[str, list[bytes]]) -> None:
        service, body = request
        sock.send_multipart(mdp.client_request(service.encode(), *body))
        assert sock.poll(int(ANSWER_S * 1000)), f"{service} did not answer {body!r}"
        reply_frames = sock.recv_multipart()
        assert reply_frames[:3] == [mdp.CLIENT, mdp.C_FINAL, service.encode()]
        reply = decode(reply_frames[3]).body
        code = reply.code if isinstance(reply, ErrorReply) else None
        assert code != "internal_error", f"{service} failed on {body!r}: {reply!r}"
        try:
            if len(body) != 1:
                raise MessageError("not_envelope", "frames")
            sent: Envelope[Message] = decode(body[0])
        except MessageError:
            assert code == "bad_message", f"{service}: {body!r} answered {reply!r}"
            seen["bad_message"] += 1
            return
        pools.learn(sent.body)
        pools.learn(reply)
        seen[f"{sent.type}->{code or reply.type_name}"] += 1

    try:
        one()
    finally:
        sock.close()
    return seen


def _run(spawn: Spawn, lea_env: dict[str, str], tmp: Path, per_service: int) -> None:
    system = System(spawn, lea_env, tmp, {
        "OLLAMA_URL": f"http://127.0.0.1:{free_port()}",  # refuses at once
        "RPA_SAFETY_CHECKS_LLM_TIMEOUT_S": "1", "RPA_LOOP_EMBEDDER": "pixel"})
    wait_ready(system, system.agent(MACHINE))
    pids = {name: system.child_pid(name) for name in ("broker", *ACTORS)}
    started = time.monotonic()
    seen = _fuzz(system, per_service, tmp)
    total = sum(seen.values())
    print(f"\nfuzz through the broker: {total} requests in {time.monotonic() - started:.1f} s:"
          f" {', '.join(f'{k} {v}' for k, v in seen.most_common(12))}")
    assert {name: system.child_pid(name) for name in pids} == pids  # nothing restarted
    for pid in pids.values():
        os.kill(pid, 0)
    fresh = system.agent("fresh")  # the fuzz may keep m1 busy with the replays it started
    wait_ready(system, fresh)
    rid = system.start(workflow(*clicks(3)), "fresh")
    system.wait_status(rid, "completed", timeout=30)


def test_fuzz_through_the_broker_short(spawn: Spawn, lea_env: dict[str, str],
                                       tmp_path: Path) -> None:
    _run(spawn, lea_env, tmp_path, SHORT)


@pytest.mark.long
def test_fuzz_through_the_broker_long(spawn: Spawn, lea_env: dict[str, str],
                                      tmp_path: Path) -> None:
    _run(spawn, lea_env, tmp_path, LONG)
