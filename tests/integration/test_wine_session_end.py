"""Issue 13: the Windows agent at log-off / shutdown, under Wine (agent/windows/session_end.py).

A Windows process that has loaded user32 gets no CTRL_LOGOFF_EVENT / CTRL_SHUTDOWN_EVENT on
its console handler; Windows sends its top-level windows WM_QUERYENDSESSION and
WM_ENDSESSION instead, and may end it once they are answered. ``wineboot --end-session``
does the same under Wine 8 (to every top-level window of the prefix, then TerminateProcess of
a process still there after WM_ENDSESSION): the agent, from the shipped folder, must stop
cleanly on it, its ledger consistent. wineboot says "shutdown" (lParam 0): the log-off
messages, and a log-off cancelled by another program, are sent by a Windows process of ours
(tests/fixtures/win_end_session.py). Each test has its own prefix (the end of a session
reaches every window in it) and an X display (no window can be made without one).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.windows.session_end import CLASS_NAME
from messages.replay import ResumeReplay
from tests.conftest import ROOT, Spawn, free_port, wait_until
from tests.integration.system import System, clicks, workflow
from tests.integration.test_wine_agent import SLOW_MACHINE
from tests.integration.transport_checks import (
    accepted,
    agent_log,
    assert_client_invariants,
    ledger,
    ledger_row,
    wait_ready,
)
from tests.wine import Wine, WineAgent, WineBundle, make_wine, windows_path
from tests.xdisplay import XDisplayFactory

pytestmark = pytest.mark.timeout(420)
SENDER = ROOT / "tests" / "fixtures" / "win_end_session.py"


@pytest.fixture
def own_wine(agent_bundle: WineBundle, tmp_path: Path) -> Iterator[Wine]:
    """A prefix of this test's own (its wineserver, its desktop)."""
    prefix = make_wine(tmp_path)
    yield prefix
    prefix.close()


def test_end_of_session_stops_the_windows_agent_and_its_ledger_answers_after(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, agent_bundle: WineBundle,
        own_wine: Wine, xdisplay: XDisplayFactory) -> None:
    """While s1 is being executed (marked started on the Windows side's ledger, its input not
    done), the session ends: the agent logs the shutdown, gives s1 its grace, abandons it,
    closes the ledger and says it stopped, before Wine ends the process. Started again, the
    ledger answers: s1 is reported indeterminate (never run blind), the person resumes it,
    and every input happens exactly once."""
    display = xdisplay([(1280, 1024, 0, 0)])
    system = System(spawn, lea_env, tmp_path, SLOW_MACHINE, ready_timeout=120)
    bundle = WineBundle(agent_bundle.bundle, own_wine)
    agent = WineAgent(bundle, system, "end1", {"actions": {"s1": {"delay_s": 120}}},
                      extra_env={"DISPLAY": display})
    try:
        wait_ready(system, agent)
        rid = system.start(workflow(*clicks(3)), "end1")
        wait_until(lambda: (row := ledger_row(agent, "s1")) and row.state == "started",
                   timeout=60)

        ended = own_wine.run(["wineboot", "--end-session"], env=own_wine.env(DISPLAY=display))
        assert ended.returncode == 0, ended.stdout
        assert agent.proc is not None
        assert agent.proc.wait(timeout=60) == 0
        wait_until(lambda: "agent.end1: stopped" in agent_log(agent), timeout=10)  # the pipe
        log = agent_log(agent)
        assert "agent.end1: got shutdown, stopping" in log, log[-3000:]
        assert "s1 still executing at exit" in log and "agent.end1: stopped" in log
        assert "no stop at log-off" not in log
        assert agent.executed("s1") == 0
        rows = {r.action_id: r.state for r in ledger(agent)}
        assert rows == {"s0": "finished", "s1": "started"}, rows

        assert agent.scenario_path is not None
        agent.scenario_path.write_text("{}")
        agent.start()
        paused = system.wait_status(rid, "paused_need_help", timeout=90)
        assert paused.pause_reason == "input_unknown"
        assert accepted(system, rid, "s1").error == "indeterminate_after_restart"
        system.call("dispatcher", ResumeReplay(replay_id=rid, operator="test", step="redo"))
        system.wait_status(rid, "completed", timeout=120)
        assert_client_invariants(system, agent, ["s0", "s1_resume", "s2"])
    finally:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.proc.wait(timeout=10)


def test_a_cancelled_log_off_keeps_the_agent_and_a_real_one_stops_it(
        tmp_path: Path, agent_bundle: WineBundle, own_wine: Wine,
        xdisplay: XDisplayFactory) -> None:
    """The messages of a log-off (lParam ENDSESSION_LOGOFF) sent to the agent's window by
    another Windows process: WM_QUERYENDSESSION is agreed to and stops nothing; a
    WM_ENDSESSION saying the log-off was cancelled leaves the agent serving; the real one
    stops it, and the agent exits by itself with 0 (nobody terminates it here)."""
    display = xdisplay([(1280, 1024, 0, 0)])
    env = own_wine.env(DISPLAY=display, PYTHONUNBUFFERED="1")
    bundle = WineBundle(agent_bundle.bundle, own_wine)
    log = tmp_path / "agent.log"
    agent = bundle.popen_python(
        "-m", "agent", "--machine-id", "off1", "--data-dir", windows_path(tmp_path / "data"),
        "--connect", f"tcp://127.0.0.1:{free_port()}", log=log, env=env)
    wait_until(lambda: "serving on" in log.read_text(errors="replace"), timeout=120)

    def send(*steps: str) -> list[dict[str, object]]:
        done = bundle.run_python(windows_path(SENDER), CLASS_NAME, *steps, env=env)
        assert done.returncode == 0, done.stdout
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    assert send("query", "cancel") == [{"step": "query", "sent": True, "answer": 1},
                                       {"step": "cancel", "sent": True, "answer": 0}]
    assert agent.poll() is None
    assert "stopping" not in log.read_text(errors="replace")

    assert send("query", "end") == [{"step": "query", "sent": True, "answer": 1},
                                    {"step": "end", "sent": True, "answer": 0}]
    assert agent.wait(timeout=60) == 0
    wait_until(lambda: "agent.off1: stopped" in log.read_text(errors="replace"), timeout=10)
    text = log.read_text(errors="replace")
    assert text.count("stopping") == 1 and "agent.off1: got log-off, stopping" in text, text
