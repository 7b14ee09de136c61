"""The Windows agent as IT meets it (docs/operations.md, "The agent's log file and status"):
started windowless (``pythonw.exe``, no console to close or to come to the front), it writes
its rotating log file in its data folder, without a pause's text (it may name a patient),
and ``python -m agent status`` says whether it runs, its server link, its monitors and its
last action. The agent runs from the shipped folder under Wine against the Linux tree.
"""

from __future__ import annotations

import signal
import struct
from pathlib import Path

from tests.conftest import Spawn, wait_until
from tests.integration.system import System, workflow
from tests.integration.transport_checks import wait_registered
from tests.wine import WineAgentFactory, WineBundle, windows_path

PATIENT = {
    "LEA_BEACON_TIMEOUT_S": "60", "LEA_HEARTBEAT_INTERVAL_MS": "500",
    "LEA_HEARTBEAT_LIVENESS": "6", "RPA_LOOP_DETECTOR_ENABLED": "0",
    "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60",
}
SECRET = "DUPONT Jean, né le 01/01/1950"
IMAGE_SUBSYSTEM_WINDOWS_GUI = 2


def subsystem(exe: Path) -> int:
    """The PE header's Subsystem: 2 a GUI program (no console), 3 a console one."""
    data = exe.read_bytes()
    (pe,) = struct.unpack_from("<I", data, 0x3C)
    assert data[pe:pe + 4] == b"PE\0\0"
    (value,) = struct.unpack_from("<H", data, pe + 24 + 68)
    return int(value)


def status(bundle: WineBundle, data: Path) -> tuple[int, str]:
    done = bundle.run_python("-m", "agent", "status", "--data-dir", windows_path(data))
    return done.returncode, done.stdout


def test_windowless_agent_logs_to_its_file_without_patient_text_and_tells_its_status(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
        wine_agent: WineAgentFactory, agent_bundle: WineBundle) -> None:
    assert subsystem(agent_bundle.pythonw_exe) == IMAGE_SUBSYSTEM_WINDOWS_GUI
    system = System(spawn, lea_env, tmp_path, PATIENT, ready_timeout=120)
    data = tmp_path / "Données Léa" / "agent"
    agent = wine_agent(system, "win1", data_dir=data, windowless=True)
    log = data / "logs" / "agent.log"
    wait_until(lambda: log.exists() and "dispatcher answered hello" in log.read_text(
        encoding="utf-8"), timeout=180, interval=0.5)
    wait_registered(system, "win1")

    rid = system.start(workflow(
        {"type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.5}},
        {"type": "pause_for_human", "parameters": {"message": f"Vérifiez {SECRET}"}}), "win1")
    paused = system.wait_status(rid, "paused_need_help", timeout=120)
    assert paused.status == "paused_need_help"
    wait_until(lambda: "REPLAY PAUSED" in log.read_text(encoding="utf-8"), timeout=60)
    text = log.read_text(encoding="utf-8")
    assert "serving on" in text and "s0 done: success=True" in text
    assert f"REPLAY PAUSED {rid} (user_request) at s1: message of" in text, text[-2000:]
    assert SECRET not in text and "DUPONT" not in text

    code, said = status(agent_bundle, data)
    assert code == 0, said
    assert "agent.win1: running" in said and "executor simulated" in said, said
    assert "server link: connected to tcp://" in said, said
    assert "dispatcher answered hello: never" not in said, said
    assert "monitors: 1" in said, said
    assert f"last action: s0 (click) of replay {rid}: ok" in said, said
    assert "agent.log" in said, said

    assert agent.proc is not None
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait(timeout=30)
    code, said = status(agent_bundle, data)
    assert code == 3 and "agent.win1: not running" in said, said
