"""Issue 7 item 4: an agent that reaches the broker through its own SSH tunnel.

A real sshd on 127.0.0.1 (tests/integration/sshd.py) lets the agent forward to the broker's
CURVE port only (inside the tunnel the agent speaks CURVE with its own key); the
broker stays on loopback. The agent runs ``ssh -N -L`` itself; the test kills
that ssh (kill -9) twice in the middle of a replay: the agent starts it again, its sockets
reconnect, and the replay completes with every input performed exactly once.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import psutil

from tests.conftest import ROOT, Spawn, free_port, python_argv, wait_until
from tests.integration.sshd import start_sshd
from tests.integration.system import Agent, System, clicks, workflow
from tests.integration.transport_checks import agent_log, assert_client_invariants, wait_ready

STEPS = 12


def curve_env(tmp: Path, *agents: str) -> tuple[dict[str, str], int]:
    """The settings of a CURVE broker on loopback whose allow-list has ``agents`` (keys made
    by ``run.py keys generate``), and its CURVE port: what the SSH tunnel reaches."""
    keys = tmp / "keys"
    agent_flags = [flag for name in agents for flag in ("--agent", name)]
    subprocess.run(python_argv("run.py", "keys", "generate", "--dir", str(keys),
                               *agent_flags, "--allow"),
                   cwd=ROOT, check=True, capture_output=True)
    port = free_port()
    return {"LEA_CURVE": "1", "LEA_CURVE_ENDPOINT": f"tcp://127.0.0.1:{port}",
            "LEA_KEYS_DIR": str(keys)}, port


def ssh_child(agent: Agent) -> int | None:
    """The pid of the ssh the agent runs now, if one runs."""
    assert agent.proc is not None
    for child in psutil.Process(agent.proc.pid).children():
        try:
            if child.name() == "ssh" and child.status() != psutil.STATUS_ZOMBIE:
                return int(child.pid)
        except psutil.NoSuchProcess:
            continue
    return None


def kill_ssh_when(agent: Agent, executed: int) -> int:
    """Once the agent has performed ``executed`` inputs, kill -9 its ssh; returns the pid."""
    wait_until(lambda: len(agent.effects()) >= executed, timeout=30)
    pid = ssh_child(agent)
    assert pid is not None
    psutil.Process(pid).send_signal(signal.SIGKILL)
    return pid


def test_agent_through_its_ssh_tunnel_survives_ssh_kills(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    curve, broker_port = curve_env(tmp_path, "tun1")
    sshd = start_sshd(spawn, tmp_path, broker_port)
    # Identical clicks are loop-detector fodder; this test is about the transport only.
    system = System(spawn, lea_env, tmp_path, {**curve, "RPA_LOOP_DETECTOR_ENABLED": "0"})
    agent = system.agent("tun1", {"default": {"delay_s": 0.3}}, extra_args=sshd.agent_args())
    wait_ready(system, agent)
    # Its sockets go to the tunnel's local end, not to the broker's port.
    served = re.search(r"serving on tcp://127\.0\.0\.1:(\d+)", agent_log(agent))
    assert served is not None and int(served.group(1)) != broker_port
    first = ssh_child(agent)

    rid = system.start(workflow(*clicks(STEPS)), "tun1")
    killed = [kill_ssh_when(agent, 3), kill_ssh_when(agent, 7)]
    summary = system.wait_status(rid, "completed", timeout=60)

    assert summary.completed_actions == STEPS
    assert_client_invariants(system, agent, [f"s{i}" for i in range(STEPS)])
    assert killed[0] == first and killed[1] != first
    log = agent_log(agent)
    assert log.count("ssh tunnel: ssh exited") >= 2
    assert "ssh tunnel: ssh started (pid" in log and "start 3)" in log
    now = ssh_child(agent)
    assert now is not None and now not in killed  # the tunnel is up again


def test_an_agent_whose_ssh_key_is_refused_says_so_and_retries(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    """No tree needed: the agent reports what ssh said, and tries again with a backoff."""
    curve, broker_port = curve_env(tmp_path, "tun2")
    sshd = start_sshd(spawn, tmp_path, broker_port)
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    args = sshd.agent_args()
    args[args.index("--ssh-key") + 1] = str(stranger)
    spawn(python_argv("-m", "agent", "--machine-id", "tun2", "--data-dir",
                      str(tmp_path / "tun2"), *args), env={**lea_env, **curve},
          name="agent-tun2")

    def log() -> str:
        return "".join(p.read_text() for p in tmp_path.glob("agent-tun2-*.log"))

    wait_until(lambda: "ssh started (pid" in log() and "start 2)" in log(), timeout=15)
    text = log()
    assert "ssh: " in text and "Permission denied (publickey)" in text
    assert "ssh tunnel: starting ssh again in" in text
