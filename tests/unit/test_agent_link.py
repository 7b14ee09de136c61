"""The agent's tunnel and CURVE flags without processes: parsing, the ssh command line, the
restart backoff, and the endpoint each combination of flags leads to."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from agent import command as agent_cmd
from agent.link import broker_link as agent_link
from agent.link.tunnel import (
    Backoff,
    SshTarget,
    TunnelError,
    TunnelSpec,
    parse_target,
    parse_tcp_endpoint,
    ssh_argv,
)
from cli.main import main
from runtime.settings import Settings


@pytest.mark.parametrize(("text", "target"), [
    ("lea@server", SshTarget("server", "lea", None)),
    ("lea@10.1.2.3:2222", SshTarget("10.1.2.3", "lea", 2222)),
    ("server.example:22", SshTarget("server.example", None, 22)),
    ("lea@[fe80::1]:2200", SshTarget("fe80::1", "lea", 2200)),
])
def test_parse_target(text: str, target: SshTarget) -> None:
    assert parse_target(text) == target


@pytest.mark.parametrize("text", ["", "lea@", "lea@host:0", "lea@host:70000", "a b@host",
                                  "lea@host:port", "-oProxyCommand=x"])
def test_parse_target_refuses(text: str) -> None:
    with pytest.raises(TunnelError):
        parse_target(text)


def test_parse_tcp_endpoint() -> None:
    assert parse_tcp_endpoint("tcp://127.0.0.1:5555") == ("127.0.0.1", 5555)
    assert parse_tcp_endpoint("tcp://0.0.0.0:5558") == ("127.0.0.1", 5558)
    assert parse_tcp_endpoint("tcp://*:5558") == ("127.0.0.1", 5558)
    assert parse_tcp_endpoint("tcp://[::1]:5555") == ("::1", 5555)
    for bad in ("ipc:///tmp/x", "tcp://host", "tcp://host:0"):
        with pytest.raises(TunnelError):
            parse_tcp_endpoint(bad)


def test_ssh_argv_forwards_one_port_and_never_asks() -> None:
    spec = TunnelSpec(SshTarget("srv", "lea", 2222), 40000, "127.0.0.1", 5555,
                      key_file=Path("/k/id"), known_hosts=Path("/k/kh"),
                      host_key_check="yes", options=("ProxyJump=bastion",))
    argv = ssh_argv(spec)
    assert argv[0] == "ssh" and "-N" in argv and argv[-1] == "lea@srv"
    assert argv[argv.index("-L") + 1] == "127.0.0.1:40000:127.0.0.1:5555"
    options = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {"BatchMode=yes", "ExitOnForwardFailure=yes", "IdentitiesOnly=yes",
            "UserKnownHostsFile=/k/kh", "StrictHostKeyChecking=yes",
            "ProxyJump=bastion"} <= options
    assert argv[argv.index("-i") + 1] == "/k/id" and argv[argv.index("-p") + 1] == "2222"
    bare = ssh_argv(TunnelSpec(SshTarget("srv"), 40000, "::1", 5555))
    assert bare[bare.index("-L") + 1] == "127.0.0.1:40000:[::1]:5555"
    assert "-p" not in bare and "-i" not in bare and bare[-1] == "srv"
    assert not any(a.startswith("StrictHostKeyChecking") for a in bare)  # ssh's config rules


def test_backoff_grows_while_failing_and_starts_over_after_a_stable_tunnel() -> None:
    backoff = Backoff()
    delays = [backoff.after_exit(0.5) for _ in range(8)]
    assert delays == sorted(delays) and delays[0] < 1.0 and delays[-1] == Backoff.DELAYS_S[-1]
    assert backoff.after_exit(Backoff.STABLE_S) == Backoff.DELAYS_S[0]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    agent_cmd.add_arguments(parser)
    return parser.parse_args(["--machine-id", "ws1", *argv])


def test_link_endpoints(tmp_path: Path) -> None:
    settings = Settings(mdp_endpoint="tcp://127.0.0.1:5555",
                        curve_endpoint="tcp://0.0.0.0:5558", keys_dir=str(tmp_path / "keys"))
    plain = agent_link.build(settings, _args(), "ws1")
    assert plain.settings.mdp_endpoint == "tcp://127.0.0.1:5555"
    assert plain.curve is None and plain.tunnel is None

    with pytest.raises(agent_link.LinkError, match="keys generate --agent ws1"):
        agent_link.build(settings, _args("--curve"), "ws1")
    with pytest.raises(agent_link.LinkError, match="keys generate --agent ws1"):
        agent_link.build(settings, _args("--ssh", "lea@srv"), "ws1")  # SSH means CURVE too
    assert main(["keys", "generate", "--dir", str(tmp_path / "keys"), "--agent", "ws1"]) == 0
    # Through SSH the agent speaks CURVE, to the broker's CURVE listener, never the plain door.
    tunnelled = agent_link.build(settings, _args("--ssh", "lea@srv:2222",
                                                 "--ssh-local-port", "41000"), "ws1")
    assert tunnelled.tunnel is not None and tunnelled.curve is not None
    assert tunnelled.settings.mdp_endpoint == "tcp://127.0.0.1:41000"
    assert "127.0.0.1:41000:127.0.0.1:5558" in tunnelled.tunnel.argv
    curved = agent_link.build(settings, _args("--curve"), "ws1")
    assert curved.curve is not None and curved.settings.mdp_endpoint == "tcp://0.0.0.0:5558"
    both = agent_link.build(settings, _args("--curve", "--connect", "tcp://srv:5558",
                                            "--ssh", "lea@srv"), "ws1")
    assert both.curve is not None and both.tunnel is not None
    assert both.tunnel.spec.remote_host == "srv" and both.tunnel.spec.remote_port == 5558


@pytest.mark.parametrize(("argv", "message"), [
    (["--ssh", "lea@srv", "--connect", "ipc:///tmp/broker"], "tcp://HOST:PORT"),
    (["--ssh", "lea@srv", "--ssh-key", "/nonexistent/id"], "no such file"),
    (["--ssh", "lea@srv", "--ssh-local-port", "70000"], "not a port"),
    (["--curve", "--server-key", "/nonexistent/server.key"], "cannot read"),
])
def test_link_errors_are_clear(tmp_path: Path, argv: list[str], message: str) -> None:
    settings = Settings(keys_dir=str(tmp_path))
    with pytest.raises(agent_link.LinkError, match=message):
        agent_link.build(settings, _args(*argv), "ws1")


def test_up_with_curve_and_no_keys_says_how_to_make_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data-dir", str(tmp_path), "up", "--curve"]) == 2
    err = capsys.readouterr().err
    assert "server.key_secret" in err and "keys generate" in err
