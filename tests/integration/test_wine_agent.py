"""Issue 13: the agent on Windows CPython 3.11 (the shipped folder, under Wine).

The server tree runs natively on Linux; the agent runs from the folder ``cli/bundle.py``
builds (tests/wine.py), as a real Windows process that the tests kill -9 for real.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from messages.replay import PauseReplay, ResumeReplay
from tests.conftest import ROOT, Spawn, free_port, wait_until
from tests.integration.system import System, clicks, workflow
from tests.integration.transport_checks import (
    accepted,
    agent_log,
    assert_client_invariants,
    ledger,
    ledger_row,
    wait_ready,
)
from tests.wine import WineAgentFactory, WineBundle, windows_path

STEPS = 30
SLOW_MACHINE = {
    # This test is about the ledger, not the loop detector (30 clicks) or the watchdog.
    "RPA_LOOP_DETECTOR_ENABLED": "0", "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60",
    # A Windows process under Wine starts in seconds, and a shared CI machine may be busy:
    # patience, so that no heartbeat timing decides anything here.
    "LEA_BEACON_TIMEOUT_S": "60", "LEA_HEARTBEAT_INTERVAL_MS": "500",
    "LEA_HEARTBEAT_LIVENESS": "6",
}


def test_the_shipped_agent_starts_on_win32(agent_bundle: WineBundle) -> None:
    """Every module of the folder's agent imported by Windows CPython (sys.platform ==
    'win32'; the desktop executor's Win32 code too, per-monitor DPI awareness set), then
    ``python -m agent --help``, in one Windows process (each start costs seconds)."""
    modules = (agent_bundle.app / "agent").rglob("*.py")
    names = sorted(".".join(p.relative_to(agent_bundle.app).with_suffix("").parts)
                   .removesuffix(".__init__") for p in modules)
    probe = ("import importlib, runpy, sys, platform; assert sys.platform == 'win32';"
             f" [importlib.import_module(m) for m in {names!r} if m != 'agent.__main__'];"
             " import agent.screen.win32 as w; w.ensure_dpi_awareness();"
             " print('imported', len(sys.modules), platform.system(), sys.version);"
             " sys.argv = ['agent', '--help']; runpy.run_module('agent', run_name='__main__')")
    done = agent_bundle.run_python("-c", probe)
    assert done.returncode == 0, done.stdout
    assert "imported" in done.stdout and "Windows" in done.stdout and "MSC" in done.stdout
    assert "--machine-id" in done.stdout and "Léa workstation agent" in done.stdout


def test_run_py_agent_help_from_a_checkout(agent_bundle: WineBundle) -> None:
    """The README's ``python run.py agent --help``, with Windows CPython on this checkout."""
    script = (f"import sys, runpy; sys.path.insert(0, {windows_path(ROOT)!r});"
              " sys.argv = ['run.py', 'agent', '--help'];"
              f" runpy.run_path({windows_path(ROOT / 'run.py')!r}, run_name='__main__')")
    done = agent_bundle.run_python("-c", script)
    assert done.returncode == 0, done.stdout
    assert "usage: python run.py agent" in done.stdout and "--machine-id" in done.stdout


def test_thirty_steps_exactly_once_across_kill_9_of_the_windows_agent(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
        wine_agent: WineAgentFactory) -> None:
    """A 30-step replay by the agent under Wine, whose Windows process is killed (kill -9)
    twice and started again: once while s10 is marked started on its ledger (Windows side)
    before its input, once while idle at a pause. The ledger answers what was done: s10 is
    reported indeterminate (never run blind), the person resumes it, and every input of the
    replay happens exactly once (effects log), the reports all acked (C1), one at a time
    (C2)."""
    system = System(spawn, lea_env, tmp_path, SLOW_MACHINE, ready_timeout=120)
    data_dir = tmp_path / "Données de Léa" / "ledger folder"  # bad input: spaces, non-ASCII
    agent = wine_agent(system, "win1", {"actions": {"s10": {"delay_s": 120}}},
                       data_dir=data_dir)
    wait_ready(system, agent)
    rid = system.start(workflow(*clicks(STEPS)), "win1")

    wait_until(lambda: (row := ledger_row(agent, "s10")) and row.state == "started",
               timeout=60)
    agent.kill(signal.SIGKILL)
    assert agent.executed("s10") == 0
    assert agent.scenario_path is not None
    agent.scenario_path.write_text("{}")
    agent.start()
    paused = system.wait_status(rid, "paused_need_help", timeout=90)
    assert paused.pause_reason == "input_unknown"
    assert accepted(system, rid, "s10").error == "indeterminate_after_restart"
    assert agent.executed("s10") == 0

    # The person sees s10 was not done: Léa redoes it (by default she would go on).
    system.call("dispatcher", ResumeReplay(replay_id=rid, operator="test", step="redo"))
    wait_until(lambda: len(agent.effects()) >= 20, timeout=120)
    system.call("dispatcher", PauseReplay(replay_id=rid, operator="test"))
    system.wait_status(rid, "paused_need_help", timeout=60,
                       where=lambda s: system.inflight_of(rid) is None)
    wait_until(lambda: all(r.state == "finished" and not r.unacked for r in ledger(agent)),
               timeout=60)  # idle: nothing started, every report acked
    agent.kill(signal.SIGKILL)
    agent.start()
    wait_ready(system, agent)
    system.call("dispatcher", ResumeReplay(replay_id=rid, operator="test"))
    summary = system.wait_status(rid, "completed", timeout=180)

    ids = [f"s{i}" for i in range(STEPS)]
    ids[10] = "s10_resume"
    assert summary.completed_actions == STEPS
    assert_client_invariants(system, agent, ids)
    log = agent_log(agent)
    assert log.count("serving on") == 3, log[-3000:]
    assert "Données de Léa\\ledger folder\\ledger.sqlite3" in log  # the Windows path
    assert (data_dir / "ledger.sqlite3").is_file()


def test_ctrl_c_stops_the_windows_agent_and_its_ledger_is_locked_meanwhile(
        agent_bundle: WineBundle, tmp_path: Path) -> None:
    """Ctrl-C (Wine turns SIGINT into the console's CTRL_C_EVENT): Python's handler, the
    wake-up socket, a clean stop with exit 0. Meanwhile a second agent on the same ledger
    is refused (filelock's LockFileEx on Windows), naming the holder's pid. (That the lock
    is free again after the process is gone: the 30-step test's restarts.)"""
    data_dir = windows_path(tmp_path / "ledger")
    argv = ["-m", "agent", "--machine-id", "ctrl1", "--data-dir", data_dir,
            "--connect", f"tcp://127.0.0.1:{free_port()}"]  # no broker: it need not serve
    log = tmp_path / "agent.log"
    env = agent_bundle.wine.env(PYTHONUNBUFFERED="1")
    first = agent_bundle.popen_python(*argv, log=log, env=env)
    wait_until(lambda: "serving on" in log.read_text(errors="replace"), timeout=120)

    second = agent_bundle.run_python(*argv, env=env)
    assert second.returncode == 2, second.stdout
    pid = re.search(r"in use by another agent \(pid (\d+)\)", second.stdout)
    assert pid is not None, second.stdout
    assert f"agent.ctrl1[{pid.group(1)}]" in log.read_text(errors="replace")

    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=60) == 0
    text = log.read_text(errors="replace")
    assert "got SIGINT, stopping" in text and "agent.ctrl1: stopped" in text, text[-2000:]
