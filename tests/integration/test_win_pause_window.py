"""The pause window on Windows (docs/screens-and-pauses.md): the agent from the shipped folder,
under Wine, on the two-monitor desktop of tests/win_desktop.py, with its default settings
(``--executor desktop``, ``LEA_PAUSE_WINDOW`` unset). The window is read from another Windows
process, as Windows shows it (tests/fixtures/win_windows.py: EnumWindows, WM_GETTEXT); it
goes away at the pause's end, and with the agent when the agent is killed.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agent.windows.pause_text import HEADLINE, TITLE, notice_text
from messages.base import Message
from messages.pause import AgentPauseEnded
from messages.replay import Ack
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import serves
from tests.integration.test_pause_notice import PAUSE as SHOWN_ON_LINUX
from tests.win_desktop import PRIMARY, WinDesk
from tests.wine import windows_path
from transport.client import SyncClient

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PAUSE = SHOWN_ON_LINUX.model_copy(update={"monitor_index": 1})  # 40 long lines, accents

pytestmark = pytest.mark.timeout(400)


def _windows(desk: WinDesk) -> list[dict[str, Any]]:
    done = subprocess.run(desk.python(windows_path(FIXTURES / "win_windows.py"), TITLE),
                          env=desk.env(), capture_output=True, timeout=120, check=False)
    out = done.stdout.decode("utf-8", "replace")
    line = next((x for x in out.splitlines() if x.startswith("{")), None)
    assert line is not None, out + done.stderr.decode("utf-8", "replace")
    windows: list[dict[str, Any]] = json.loads(line)["windows"]
    return windows


def _send(client: SyncClient, msg: Message) -> Ack:
    # Opening a window starts a Windows process: seconds under Wine on a busy machine, and
    # a call sent again would find the pause already shown.
    reply = client.call("agent.W1", msg, timeout_s=60.0, retries=0).body
    assert isinstance(reply, Ack), reply
    return reply


def test_the_person_sees_the_whole_pause_in_a_topmost_window_gone_on_resume(
        win_desk: WinDesk, spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    # A Windows process under Wine starts in seconds: no heartbeat timing is tested here.
    lea_env.update(LEA_HEARTBEAT_INTERVAL_MS="500", LEA_HEARTBEAT_LIVENESS="10")
    spawn(python_argv("-m", "broker"), env=lea_env, name="broker")
    env = win_desk.env(**{k: v for k, v in lea_env.items()
                          if k.startswith("LEA_") and k != "LEA_PAUSE_WINDOW"})
    agent = win_desk.bundle.wine.popen(win_desk.bundle.python(
        "-m", "agent", "--machine-id", "W1", "--executor", "desktop",
        "--data-dir", windows_path(tmp_path / "agent-data")), tmp_path / "agent-W1.log", env)
    client = SyncClient(lea_env["LEA_MDP_ENDPOINT"])
    try:
        wait_until(lambda: serves(client, "agent.W1"), timeout=180, interval=0.5)
        assert _send(client, PAUSE).status == "shown"
        shown = wait_until(lambda: _windows(win_desk), timeout=120, interval=1)
        assert isinstance(shown, list) and len(shown) == 1, shown
        (window,) = shown
        assert window["visible"] and window["topmost"], window
        left, top, right, bottom = window["rect"]  # on the primary monitor, whole
        assert 0 <= left < right <= PRIMARY[2] and 0 <= top < bottom <= PRIMARY[3], window
        assert right - left >= 600 and bottom - top >= 300, window
        by_class: dict[str, list[dict[str, Any]]] = {}
        for child in window["children"]:
            by_class.setdefault(child["class"], []).append(child)
        (edit,) = by_class["EDIT"]
        assert edit["text"].replace("\r\n", "\n") == notice_text(PAUSE)
        assert "Écran : 2 (index 1)" in edit["text"] and "Étape : step_7" in edit["text"]
        # 40 long lines and more: taller than the box; scrolled to the bottom, the first
        # visible line moved, so the end is reachable (never cut)
        assert edit["lines"] > 40 and edit["last_visible"] > 0, edit
        assert [c["text"] for c in by_class["STATIC"]] == [HEADLINE]
        assert [c["text"] for c in by_class["BUTTON"]] == ["J'ai lu"]

        assert _send(client, PAUSE).status == "already_shown"  # re-sent after a hello
        assert len(_windows(win_desk)) == 1
        assert _send(client, AgentPauseEnded(replay_id="r-42")).status == "closed"
        wait_until(lambda: not _windows(win_desk), timeout=120, interval=1)

        # An agent killed outright takes its window along (a job object): the restarted
        # one, told the pause again, opens the only one.
        assert _send(client, PAUSE.model_copy(update={"replay_id": "r-43"})).status == "shown"
        wait_until(lambda: _windows(win_desk), timeout=120, interval=1)
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)
        wait_until(lambda: not _windows(win_desk), timeout=120, interval=1)
    finally:
        client.close()
        win_desk.bundle.wine.stop_processes()
