"""Fuzzing: the message decoder and every request handler get generated inputs.

Inputs are structured (envelopes of every registered type with bodies drawn from the models,
some broken on purpose; tests/fuzzing.py) and unstructured (random bytes and frames), sent
from local peers and from peers the broker authenticated (CURVE identities). Each handler is
the real actor (or agent) built in-process over real stores and sockets
(tests/fuzz_targets.py), fed requests as its worker feeds them. Checked for every input:

- nothing raises, and no handler fails (no ``internal_error``), no answer hangs;
- bytes that are not one valid envelope are answered ``bad_message``; a type the handler
  does not take, ``unsupported_type``; a type an authenticated agent may not send,
  ``forbidden``; the reply carries the request's id;
- the decoder raises nothing but MessageError, and what it accepts encodes back to itself.

CI runs a short pass; ``--long`` runs >= 100,000 inputs in all and prints the figures
(``python -m pytest tests/unit/test_fuzz_handlers.py --long -s``).
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from loguru import logger

from messages.base import Message
from messages.codec import Envelope, MessageError, decode, encode
from messages.control import ErrorReply
from runtime.settings import Settings
from tests.conftest import free_port
from tests.fuzz_targets import AGENT_MACHINE, FUZZ_ENV, TARGETS, Served, Target, build
from tests.fuzzing import Deriver, Pools, frames, structured, unstructured, weighted
from transport.peer_id import client_address, identity_of, is_agent
from transport.worker import Request

SHORT = {"codec": 1000, "handler": 300}
LONG = {"codec": 30_000, "handler": 12_000}
HANG_S = 60.0  # one input answered later than this: the process dumps its stacks and exits
MAX_BYTES = 1 << 20
QUIET = ("actors", "agent", "broker")


def _settings(tmp: Path) -> Settings:
    return Settings(mdp_endpoint=f"tcp://127.0.0.1:{free_port()}",
                    bus_in_endpoint=f"tcp://127.0.0.1:{free_port()}",
                    bus_out_endpoint=f"tcp://127.0.0.1:{free_port()}",
                    data_dir=tmp / "var", max_message_bytes=MAX_BYTES)


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    """A directory in RAM if there is one: the stores fsync at every request."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    path = Path(tempfile.mkdtemp(prefix="lea-fuzz-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fuzz_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in FUZZ_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("OLLAMA_URL", f"http://127.0.0.1:{free_port()}")  # refuses at once
    # Every refusal is logged: thousands of lines that say nothing here.
    for package in QUIET:
        logger.disable(package)
    try:
        yield
    finally:
        for package in QUIET:
            logger.enable(package)


def _fuzz_settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))


# The decoder ----------------------------------------------------------------------------------

def _decoder(n: int) -> Counter[str]:
    seen: Counter[str] = Counter()
    deriver = Deriver()

    @_fuzz_settings(n)
    @given(weighted((2, structured(deriver)), (1, unstructured())))
    def one(data: bytes) -> None:
        try:
            envelope = decode(data, limit=MAX_BYTES)
        except MessageError as exc:
            seen[f"refused:{exc.code}"] += 1
            return
        # What it accepts is a message that encodes back to itself (compared encoded: a NaN
        # is not equal to itself).
        wire = encode(envelope.body, envelope.id)
        assert encode(decode(wire, limit=MAX_BYTES).body, envelope.id) == wire, envelope
        seen["accepted"] += 1

    one()
    return seen


def _report(what: str, seen: Counter[str], started: float) -> None:
    total = sum(seen.values())
    top = ", ".join(f"{k} {v}" for k, v in seen.most_common(12))
    print(f"\nfuzz {what}: {total} inputs in {time.monotonic() - started:.1f} s: {top}")


def test_decoder_fuzz_short() -> None:
    started = time.monotonic()
    seen = _decoder(SHORT["codec"])
    _report("decoder", seen, started)
    assert seen["accepted"] and sum(seen.values()) - seen["accepted"]


@pytest.mark.long
def test_decoder_fuzz_long() -> None:
    started = time.monotonic()
    seen = _decoder(LONG["codec"])
    _report("decoder", seen, started)
    assert sum(seen.values()) >= LONG["codec"]


# The handlers ---------------------------------------------------------------------------------

def _requests(target: Target, deriver: Deriver) -> st.SearchStrategy[Request]:
    taken = sorted(t.type_name for t in target.handled)
    payload = weighted((6, structured(deriver, taken)), (2, structured(deriver)),
                       (2, unstructured()))
    peer = st.binary(min_size=4, max_size=4).map(lambda b: b"\x00" + b)
    identity = deriver.pools.pick("machine_id", st.sampled_from(["m1", "rogue"]))
    address = weighted(
        (6, peer),
        (3, st.tuples(peer, identity).map(lambda t: client_address(t[0], t[1]))),  # CURVE
        (1, st.binary(max_size=8).map(lambda b: client_address(b"id:" + b, None))),  # escaped
    )
    return st.builds(Request, client=address, body=frames(payload))


def _check(target: Target, request: Request, served: Served) -> str:
    """The label of one outcome, after checking it is the right kind of answer."""
    reply = served.reply
    assert served.failure is None, f"{target.name} failed on {request!r}: {served.failure}"
    code = reply.code if isinstance(reply, ErrorReply) else None
    assert code != "internal_error", f"{target.name} raised on {request!r}: {reply!r}"
    try:
        if len(request.body) != 1:
            raise MessageError("not_envelope", "frames")
        envelope: Envelope[Message] = decode(request.body[0], limit=MAX_BYTES)
    except MessageError:
        assert code == "bad_message", f"{target.name}: {request!r} answered {reply!r}"
        return "bad_message"
    assert served.reply_id == envelope.id
    kind = type(envelope.body)
    identity = identity_of(request.client)
    # An identity of the allow-list is an agent; one starting with "@" (the doors' names,
    # which no allow-list file has) is not, whatever the broker would write.
    if is_agent(identity) and kind not in target.agent_requests:
        assert code == "forbidden", f"{target.name}: agent {identity} sent {kind}: {reply!r}"
        return "forbidden"
    if kind not in target.handled:
        assert code == "unsupported_type", f"{target.name}: {kind} answered {reply!r}"
        return "unsupported_type"
    return f"{envelope.type}->{code or reply.type_name}"


def _handler(name: str, n: int, tmp: Path) -> Counter[str]:
    target = build(name, _settings(tmp), tmp)
    pools = Pools(pinned={"machine_id": [AGENT_MACHINE]})  # the agent takes its own only
    deriver = Deriver(pools)
    seen: Counter[str] = Counter()

    @_fuzz_settings(n)
    @given(_requests(target, deriver))
    def one(request: Request) -> None:
        faulthandler.dump_traceback_later(HANG_S, exit=True)
        try:
            served = target.serve(request)
        finally:
            faulthandler.cancel_dump_traceback_later()
        seen[_check(target, request, served)] += 1
        if len(request.body) == 1:
            try:
                pools.learn(decode(request.body[0], limit=MAX_BYTES).body)
            except MessageError:
                pass
        pools.learn(served.reply)
        target.settle()

    try:
        one()
    finally:
        target.close()
    return seen


@pytest.mark.parametrize("name", TARGETS)
def test_handler_fuzz_short(name: str, fast_dir: Path, fuzz_env: None) -> None:
    started = time.monotonic()
    seen = _handler(name, SHORT["handler"], fast_dir)
    _report(name, seen, started)
    handled = sum(v for k, v in seen.items() if "->" in k)
    assert handled, f"no generated input reached a {name} handler: {seen}"


@pytest.mark.long
@pytest.mark.parametrize("name", TARGETS)
def test_handler_fuzz_long(name: str, fast_dir: Path, fuzz_env: None) -> None:
    started = time.monotonic()
    seen = _handler(name, LONG["handler"], fast_dir)
    _report(name, seen, started)
    assert sum(seen.values()) >= LONG["handler"]
