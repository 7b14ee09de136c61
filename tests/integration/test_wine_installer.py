"""``lea-agent-setup.exe`` (cli/installer.py) as a desktop team deploys it, under Wine: a
silent install with parameters, the agent started from the installed place exactly as the
log-on task says (Wine's Task Scheduler runs nothing: the task's XML is read and its command
run), a replay over CURVE, ``lea-agent status``, then a silent uninstall that leaves no task
and no program files, and keeps (or with ``/REMOVE_DATA`` removes) the data.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cli import installer
from tests.conftest import ROOT, Spawn, free_port, python_argv, wait_until
from tests.integration.probes import serves
from tests.integration.system import System, clicks, workflow
from tests.wine import Wine, WineBundle, windows_path

NS = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}
PATIENT = {
    "LEA_BEACON_TIMEOUT_S": "60", "LEA_HEARTBEAT_INTERVAL_MS": "500",
    "LEA_HEARTBEAT_LIVENESS": "6", "RPA_LOOP_DETECTOR_ENABLED": "0",
    "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60",
}

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def setup_exe(agent_bundle: WineBundle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installer of the tests' folder (its python has the Wine-only shim beside it),
    uncompressed: what is tested is the script, built as ``--setup`` builds it."""
    out = tmp_path_factory.mktemp("setup") / "lea-agent-setup.exe"
    return installer.build_setup(agent_bundle.root, out, compress=False)


def profile(wine: Wine) -> Path:
    """``%LOCALAPPDATA%`` of the prefix's user, as a Linux path."""
    (local,) = (wine.prefix / "drive_c" / "users").glob("*/AppData/Local")
    return local


def text(path: Path) -> str:
    return path.read_bytes().decode("utf-16")


@pytest.fixture
def clean(agent_bundle: WineBundle) -> Iterator[Path]:
    """The prefix's ``%LOCALAPPDATA%``, with no Léa agent installed after the test."""
    local = profile(agent_bundle.wine)
    yield local
    uninstaller = local / "Programs" / "Lea Agent" / "uninstall.exe"
    if uninstaller.exists():
        agent_bundle.wine.run([str(uninstaller), "/S", "/REMOVE_DATA"], timeout=300)
    subprocess.run(["rm", "-rf", str(local / "Lea"), str(local / "Programs" / "Lea Agent")],
                   check=False)


def install(wine: Wine, setup: Path, *params: str) -> subprocess.CompletedProcess[str]:
    done = wine.run([str(setup), "/S", *params], timeout=600)
    subprocess.run(["wineserver", "-w"], env=wine.env(), timeout=300, check=False)
    return done


def uninstall(wine: Wine, local: Path, *params: str) -> None:
    """``uninstall.exe /S``: it copies itself elsewhere and goes on there; until done."""
    program = local / "Programs" / "Lea Agent"
    wine.run([str(program / "uninstall.exe"), "/S", *params], timeout=300)
    wait_until(lambda: not program.exists(), timeout=300, interval=1)
    wait_until(lambda: "uninstalled" in text(local / "Lea" / "install.log")
               if (local / "Lea").exists() else True, timeout=120, interval=1)


def test_silent_install_runs_the_agent_from_its_place_and_uninstall_leaves_no_trace(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, agent_bundle: WineBundle,
        setup_exe: Path, clean: Path) -> None:
    wine, local = agent_bundle.wine, clean
    keys = tmp_path / "server-keys"
    subprocess.run(python_argv("run.py", "keys", "generate", "--dir", str(keys), "--agent",
                               "WS12", "--allow"), cwd=ROOT, check=True, capture_output=True)
    port = free_port()
    system = System(spawn, lea_env, tmp_path, {
        **PATIENT, "LEA_CURVE": "1", "LEA_CURVE_ENDPOINT": f"tcp://127.0.0.1:{port}",
        "LEA_KEYS_DIR": str(keys)}, ready_timeout=120)
    done = install(wine, setup_exe, "/MACHINE_ID=WS12", f"/BROKER=127.0.0.1:{port}",
                   "/EXECUTOR=simulated", f"/SERVER_KEY={windows_path(keys / 'server.key')}",
                   f"/AGENT_KEY={windows_path(keys / 'agents' / 'WS12.key_secret')}")
    assert done.returncode == 0, done.stdout
    program, data = local / "Programs" / "Lea Agent", local / "Lea"
    log = text(data / "install.log")
    assert (program / "python" / "pythonw.exe").is_file() and "installed" in log, log
    assert (data / "keys" / "WS12.key_secret").read_bytes() == (
        keys / "agents" / "WS12.key_secret").read_bytes()
    # The keys: inheritance cut, the person, the administrators and SYSTEM only.
    assert (f'icacls.exe" "{data_win(local)}\\keys" /inheritance:r /grant:r "' in log
            and ':(OI)(CI)F" /grant:r "*S-1-5-32-544:(OI)(CI)F" /grant:r'
            ' "*S-1-5-18:(OI)(CI)F" /T /Q' in log), log
    assert f'schtasks /Create /TN "Lea agent" /XML "{data_win(local)}\\lea-agent-task.xml" /F' \
        in log, log
    assert (wine.prefix / "drive_c" / "windows" / "system32" / "tasks" / "Lea agent").exists()

    task = ET.fromstring(text(data / "lea-agent-task.xml").split("?>", 1)[1])
    settings = task.find("t:Settings", NS)
    assert settings is not None
    for name, value in (("ExecutionTimeLimit", "PT0S"), ("DisallowStartIfOnBatteries", "false"),
                        ("StopIfGoingOnBatteries", "false"), ("MultipleInstancesPolicy",
                                                              "IgnoreNew")):
        assert settings.findtext(f"t:{name}", namespaces=NS) == value, name
    assert settings.find("t:RestartOnFailure", NS) is not None
    assert task.findtext("t:Triggers/t:LogonTrigger/t:Repetition/t:Interval",
                         namespaces=NS) == installer.RESTART_EVERY
    assert task.findtext("t:Principals/t:Principal/t:LogonType",
                         namespaces=NS) == "InteractiveToken"
    command = task.findtext("t:Actions/t:Exec/t:Command", namespaces=NS)
    arguments = task.findtext("t:Actions/t:Exec/t:Arguments", namespaces=NS)
    assert command is not None and arguments is not None
    assert command.endswith("\\AppData\\Local\\Programs\\Lea Agent\\python\\pythonw.exe")

    # What the task starts at log-on, with no LEA_* variable: all is in agent.args.
    env = {k: v for k, v in wine.env().items() if not k.startswith("LEA_")}
    argv = [a.strip('"') for a in shlex.split(arguments, posix=False)]  # as Windows splits
    proc = wine.popen([command, *argv], tmp_path / "task.log", env=env)
    try:
        wait_until(lambda: serves(system.client, "agent.WS12"), timeout=180, interval=0.5)
        rid = system.start(workflow(*clicks(3)), "WS12")
        assert system.wait_status(rid, "completed", timeout=120).status == "completed"
        agent_log = (data / "agent" / "logs" / "agent.log").read_text(encoding="utf-8")
        assert f"serving on tcp://127.0.0.1:{port}" in agent_log  # CURVE, the broker given
        said = wine.run(["cmd", "/c", str(program / "lea-agent.cmd"), "status"], env=env)
        assert "agent.WS12: running" in said.stdout, said.stdout
        assert f"last action: s2 (click) of replay {rid}: ok" in said.stdout, said.stdout
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(proc.pid).kill()
        proc.wait(timeout=30)

    uninstall(wine, local)
    assert not program.exists()
    assert not (wine.prefix / "drive_c" / "windows" / "system32" / "tasks" / "Lea agent"
                ).exists()
    log = text(data / "install.log")
    assert 'schtasks /Delete /TN "Lea agent" /F' in log and "data kept in" in log, log
    assert (data / "agent" / "ledger.sqlite3").exists()  # kept unless asked


def test_missing_parameters_fail_with_a_reason_and_remove_data_removes_it(
        agent_bundle: WineBundle, setup_exe: Path, clean: Path) -> None:
    wine, local = agent_bundle.wine, clean
    done = install(wine, setup_exe, "/MACHINE_ID=WS13", "/BROKER=tcp://server:5558")
    assert done.returncode == 2
    assert "without tcp://" in text(local / "Lea" / "install.log")
    done = install(wine, setup_exe, "/MACHINE_ID=WS13", "/BROKER=server:5558")
    assert done.returncode == 2
    assert "an agent never uses the plain endpoint" in text(local / "Lea" / "install.log")
    assert not (local / "Programs" / "Lea Agent").exists()
    done = install(wine, setup_exe, "/MACHINE_ID=WS13", "/BROKER=server:5558",
                   "/SSH=lea@server", *(f"/{name}={windows_path(setup_exe)}" for name in
                                        ("SSH_KEY", "SERVER_KEY", "AGENT_KEY")))
    assert done.returncode == 0, done.stdout
    args = text(local / "Lea" / "agent.args").split()
    assert args[args.index("--connect") + 1] == "tcp://server:5558"
    assert args[args.index("--ssh") + 1] == "lea@server"
    assert args[args.index("--ssh-key") + 1].endswith("\\Lea\\keys\\lea_agent")
    assert args[args.index("--agent-key") + 1].endswith("\\Lea\\keys\\WS13.key_secret")
    uninstall(wine, local, "/REMOVE_DATA")
    assert not (local / "Lea").exists() and not (local / "Programs" / "Lea Agent").exists()


def data_win(local: Path) -> str:
    """The data folder as the installer names it (``%LOCALAPPDATA%\\Lea``)."""
    return "C:\\users\\" + local.parent.parent.name + "\\AppData\\Local\\Lea"
