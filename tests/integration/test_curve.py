"""Issue 7 item 5: CURVE for agents that reach an exposed broker, with an allow-list.

One tree runs with CURVE on (``LEA_CURVE=1``, what ``run.py --curve`` sets); its keys come
from ``run.py keys generate``. Checked on it, in order: an allowed agent completes a replay;
an agent whose key is not allowed is refused, says so within seconds and the broker
publishes ``lea:peer_refused``; the same key put in the allow-list directory is accepted
(no restart: the broker's pid is unchanged) and that agent completes a replay; an agent told
``--exit-on-auth-failure`` exits with status 3; an agent with a wrong server key, or that
speaks CURVE to the plain loopback endpoint, says so.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from agent.link.curve_link import EXIT_REFUSED
from tests.conftest import ROOT, Spawn, free_port, python_argv, wait_until
from tests.integration.system import Agent, System, clicks, workflow
from tests.integration.transport_checks import (
    Bus,
    agent_log,
    assert_client_invariants,
    wait_ready,
    wait_registered,
)
from transport.curve_keys import KeyLayout, key_prefix, read_key_file


def generate(keys: Path, *args: str) -> None:
    subprocess.run(python_argv("run.py", "keys", "generate", "--dir", str(keys), *args),
                   cwd=ROOT, check=True, capture_output=True)


def replay_completes(system: System, agent: Agent, steps: int = 3) -> None:
    rid = system.start(workflow(*clicks(steps)), agent.machine_id)
    system.wait_status(rid, "completed", timeout=30)
    assert_client_invariants(system, agent, [f"s{i}" for i in range(steps)])


def test_curve_allow_list_refuses_then_admits_without_restart(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    generate(keys, "--agent", "good", "--allow")
    generate(keys, "--agent", "late", "--agent", "rogue")  # not in the allow-list
    layout = KeyLayout(keys)
    curve_endpoint = f"tcp://127.0.0.1:{free_port()}"
    system = System(spawn, lea_env, tmp_path, {
        "LEA_CURVE": "1", "LEA_CURVE_ENDPOINT": curve_endpoint, "LEA_KEYS_DIR": str(keys),
        "RPA_LOOP_DETECTOR_ENABLED": "0"})  # identical clicks: not a loop, here
    bus = Bus(system.env)
    broker_pid = system.child_pid("broker")
    try:
        good = system.agent("good", extra_args=["--curve"])
        wait_ready(system, good)
        assert f"serving on {curve_endpoint}" in agent_log(good)
        replay_completes(system, good)

        late = system.agent("late", extra_args=["--curve"])
        wait_until(lambda: "REFUSED this agent's CURVE key" in agent_log(late), timeout=10)
        prefix = key_prefix(read_key_file(layout.agent_public("late"))[0])
        assert f"key {prefix}..." in agent_log(late)
        refused = bus.wait_for("lea:peer_refused", timeout=10, key_prefix=prefix)
        assert refused.data["reason"] == "key not in the allow-list"
        wait_registered(system, "late", present=False)
        assert late.proc is not None and late.proc.poll() is None  # it keeps retrying

        shutil.copyfile(layout.agent_public("late"), layout.allowed / "late.key")
        wait_ready(system, late)
        assert "accepted this agent's key" in agent_log(late)
        replay_completes(system, late)

        rogue = system.agent("rogue", extra_args=["--curve", "--exit-on-auth-failure"])
        assert rogue.proc is not None
        assert rogue.proc.wait(timeout=15) == EXIT_REFUSED
        assert "exiting (--exit-on-auth-failure)" in agent_log(rogue)

        # The broker's public key is not ours to pretend: a wrong one fails every handshake.
        wrong = system.agent("good2", extra_args=[
            "--curve", "--agent-key", str(layout.agent_secret("good")),
            "--server-key", str(layout.agent_public("late"))])
        wait_until(lambda: "keeps failing: is --server-key" in agent_log(wrong), timeout=15)
        plain = system.agent("good3", extra_args=[  # CURVE to the loopback (plain) door
            "--curve", "--agent-key", str(layout.agent_secret("good")),
            "--connect", system.env["LEA_MDP_ENDPOINT"]])
        wait_until(lambda: "does not speak CURVE" in agent_log(plain), timeout=15)
        assert system.child_pid("broker") == broker_pid  # all of it without a restart
    finally:
        bus.close()
