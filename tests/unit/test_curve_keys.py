"""CURVE's pure parts: key files, the allow-list read again on change, the ZAP verdicts, the
agent's handshake watch; and ``run.py keys generate`` (its files, never an overwrite)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from zmq.utils import z85

from agent.link.curve_link import EXIT, FAILED, MISMATCH, OK, REFUSED, RETRY, HandshakeWatch
from broker.curve_listener import AllowList, decide, server_keys_problem
from cli.main import main
from transport.curve_keys import CurveConfigError, KeyLayout, read_key_file


def generate(keys: Path, *args: str) -> int:
    return main(["keys", "generate", "--dir", str(keys), *args])


def public_raw(path: Path) -> bytes:
    return z85.decode(read_key_file(path)[0])


def zap(public: bytes, mechanism: bytes = b"CURVE", domain: bytes = b"lea") -> list[bytes]:
    """A ZAP request as libzmq sends it, after the routing id and the empty frame."""
    return [b"1.0", b"req-1", domain, b"10.0.0.7", b"", mechanism, public]


def test_keys_generate_makes_the_layout_and_never_overwrites(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    assert generate(keys, "--agent", "ws1", "--allow") == 0
    layout = KeyLayout(keys)
    for path in (layout.server_public, layout.server_secret, layout.agent_public("ws1"),
                 layout.agent_secret("ws1"), layout.allowed / "ws1.key"):
        assert path.is_file(), path
    for secret in (layout.server_secret, layout.agent_secret("ws1")):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert read_key_file(layout.server_secret, secret=True)[1] is not None
    assert public_raw(layout.allowed / "ws1.key") == public_raw(layout.agent_public("ws1"))

    before = layout.server_secret.read_bytes(), layout.agent_secret("ws1").read_bytes()
    assert generate(keys, "--agent", "ws1", "--agent", "ws2") == 0
    assert (layout.server_secret.read_bytes(), layout.agent_secret("ws1").read_bytes()) == before
    assert layout.agent_secret("ws2").is_file()
    assert not (layout.allowed / "ws2.key").exists()  # only with --allow


def test_keys_generate_refuses_a_bad_agent_name(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert generate(tmp_path / "keys", "--agent", "../evil") == 2
    assert "invalid agent name" in capsys.readouterr().err
    assert not (tmp_path / "keys").exists()


def test_read_key_file_says_what_is_wrong(tmp_path: Path) -> None:
    missing = tmp_path / "nope.key"
    with pytest.raises(CurveConfigError, match="cannot read"):
        read_key_file(missing)
    garbage = tmp_path / "garbage.key"
    garbage.write_text('curve\n    public-key = "tooshort"\n')
    with pytest.raises(CurveConfigError, match="not a 40-character Z85"):
        read_key_file(garbage)
    assert generate(tmp_path / "keys") == 0
    with pytest.raises(CurveConfigError, match="secret key"):
        read_key_file(KeyLayout(tmp_path / "keys").server_public, secret=True)
    problem = server_keys_problem(tmp_path / "empty")
    assert problem is not None and "keys generate" in problem
    assert server_keys_problem(tmp_path / "keys") is None


def test_the_allow_list_is_read_again_when_a_file_changes(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    assert generate(keys, "--agent", "a", "--agent", "b") == 0
    layout = KeyLayout(keys)
    allow = AllowList(layout.allowed)
    assert allow.refresh() and len(allow) == 0
    assert not allow.refresh()  # nothing changed: nothing read
    a, b = public_raw(layout.agent_public("a")), public_raw(layout.agent_public("b"))
    assert decide(zap(a), allow).status == b"400"

    (layout.allowed / "a.key").write_bytes(layout.agent_public("a").read_bytes())
    (layout.allowed / "junk.key").write_text("not a certificate\n")
    (layout.allowed / "notes.txt").write_text("ignored: not a .key file\n")
    assert allow.refresh()
    verdict = decide(zap(a), allow)
    assert (verdict.status, verdict.user_id) == (b"200", "a")
    assert verdict.public_key == read_key_file(layout.agent_public("a"))[0]
    assert decide(zap(b), allow).status == b"400"
    assert len(allow.problems) == 1 and "junk.key" in allow.problems[0]

    (layout.allowed / "a.key").unlink()  # a revoked key counts at the next handshake
    assert allow.refresh()
    assert decide(zap(a), allow).status == b"400"


def test_zap_verdicts_on_odd_requests(tmp_path: Path) -> None:
    allow = AllowList(tmp_path / "missing")  # no directory: nobody is allowed
    allow.refresh()
    assert len(allow) == 0
    key = os.urandom(32)
    assert decide(zap(key), allow).text == "key not in the allow-list"
    assert decide(zap(key, mechanism=b"NULL"), allow).status == b"400"
    assert decide(zap(key, domain=b"other"), allow).status == b"400"
    assert decide([b"2.0", *zap(key)[1:]], allow).status == b"500"
    assert decide(zap(key)[:4], allow).status == b"500"
    assert decide(zap(b"short"), allow).status == b"500"


def test_handshake_watch_reports_each_round_once_and_backs_off() -> None:
    watch = HandshakeWatch(backoff=(1.0, 5.0))
    first = watch.outcome(REFUSED, 100.0)
    assert first is not None and (first.attempt, first.retry_in_s) == (1, 1.0)
    assert watch.outcome(REFUSED, 100.01) is None  # the other socket, same round
    assert watch.due(100.5) is None
    assert watch.due(101.0) == RETRY and watch.due(101.0) is None
    second = watch.outcome(REFUSED, 101.1)
    assert second is not None and (second.attempt, second.retry_in_s) == (2, 5.0)
    third_round_at = 106.1
    assert watch.due(third_round_at) == RETRY
    third = watch.outcome(REFUSED, third_round_at)
    assert third is not None and third.retry_in_s == 5.0  # the last delay repeats
    accepted = watch.outcome(OK, 112.0)
    assert accepted is not None and (accepted.kind, accepted.attempt) == (OK, 3)
    assert watch.outcome(OK, 113.0) is None  # nothing to say any more


def test_handshake_watch_tolerates_a_few_silent_failures_and_can_exit() -> None:
    watch = HandshakeWatch(tolerated_failures=3)
    assert watch.outcome(FAILED, 1.0) is None
    assert watch.outcome(FAILED, 1.1) is None
    trouble = watch.outcome(FAILED, 1.2)
    assert trouble is not None and trouble.kind == FAILED
    assert watch.outcome(FAILED, 1.3) is None  # the same round
    precise = watch.outcome(MISMATCH, 1.4)  # ...seen more precisely: said again
    assert precise is not None and precise.kind == MISMATCH and precise.attempt == 1
    assert watch.outcome(REFUSED, 1.5) is None
    quitting = HandshakeWatch(exit_on_failure=True)
    trouble = quitting.outcome(REFUSED, time.monotonic())
    assert trouble is not None and trouble.retry_in_s is None
    assert quitting.due(0.0) == EXIT
