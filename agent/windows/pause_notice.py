"""Showing a pause to the person at the workstation (docs/screens-and-pauses.md).

The dispatcher sends :class:`~messages.pause.AgentPaused` to ``agent.<machine_id>`` when a
replay on this machine pauses (and again after each agent hello); :class:`AgentPauseEnded`
when it resumes or ends. Each pause is written in full to the log, always; where a screen
exists it is also shown in a window (:mod:`agent.windows.pause_window`, its own process), once per
pause, closed when the pause ends or the agent stops.

``LEA_PAUSE_WINDOW``: ``auto`` (default: a window with the desktop executor when a screen
and a toolkit are there: Win32 on Windows, Tk elsewhere), ``on`` (also with the simulated
executor, for demos), ``off``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

from loguru import logger

from messages.base import Message
from messages.pause import AgentPaused, AgentPauseEnded
from messages.replay import Ack

WindowMode = Literal["auto", "on", "off"]


def window_mode() -> WindowMode:
    raw = os.environ.get("LEA_PAUSE_WINDOW", "auto").strip().lower()
    if raw in ("1", "on", "true", "yes"):
        return "on"
    if raw in ("0", "off", "false", "no"):
        return "off"
    return "auto"


def can_show_windows() -> bool:
    """A screen to draw on and a toolkit to draw with (Windows: user32, always there)."""
    if sys.platform == "win32":
        return True
    screen = sys.platform == "darwin" or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return screen and importlib.util.find_spec("tkinter") is not None


def _child_env() -> dict[str, str]:
    """This environment, with our package importable whatever the working directory."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


class PauseNotices:
    """The pauses shown on this workstation, one window each at most."""

    def __init__(self, executor_name: str, mode: WindowMode | None = None) -> None:
        mode = mode or window_mode()
        wanted = mode == "on" or (mode == "auto" and executor_name == "desktop")
        self.windows = wanted and can_show_windows()
        if wanted and not self.windows:
            logger.info("no screen or no Tk here: pauses go to the log only")
        self._seen: set[tuple[str, float | None, str]] = set()
        self._open: dict[str, subprocess.Popen[bytes]] = {}

    def on_paused(self, msg: AgentPaused) -> Message:
        key = (msg.replay_id, msg.paused_at, msg.message)
        if key in self._seen and self._showing(msg.replay_id):
            return Ack(status="already_shown")
        self._seen.add(key)
        checks = "".join(f"\n  [{'required' if c.required else 'optional'}] {c.label}"
                         for c in msg.safety_checks)
        where = f" at {msg.action_id}" if msg.action_id else ""
        # The log file gets the summary only: the message may name a patient (runtime/logs.py)
        summary = (f"REPLAY PAUSED {msg.replay_id} ({msg.reason or 'pause'}){where}: message of"
                   f" {len(msg.message)} characters, {len(msg.safety_checks)} checks")
        logger.bind(redacted=summary).warning("REPLAY PAUSED {} ({}){}:\n{}{}", msg.replay_id,
                                              msg.reason or "pause", where, msg.message,
                                              checks)
        if not self.windows:
            return Ack(status="logged")
        self._close(msg.replay_id)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "agent.windows.pause_window"],
                                    env=_child_env(), stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL,
                                    start_new_session=True,
                                    creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0))
            assert proc.stdin is not None
            proc.stdin.write(msg.model_dump_json().encode())
            proc.stdin.close()
        except OSError as exc:
            logger.error("cannot open the pause window: {} (the log has the message)", exc)
            return Ack(status="logged")
        if sys.platform == "win32":
            from agent.windows.pause_win32 import end_with_this_process

            try:
                end_with_this_process(proc.pid)
            except OSError as exc:  # the window still shows; only a crash would leave it
                logger.warning("the pause window may outlive the agent: {}", exc)
        self._open[msg.replay_id] = proc
        return Ack(status="shown")

    def on_pause_ended(self, msg: AgentPauseEnded) -> Message:
        logger.info("replay {} no longer paused ({})", msg.replay_id, msg.status)
        self._seen = {k for k in self._seen if k[0] != msg.replay_id}
        return Ack(status="closed" if self._close(msg.replay_id) else "not_shown")

    def _showing(self, replay_id: str) -> bool:
        proc = self._open.get(replay_id)
        # logged-only pauses count as shown; a window the person closed does not reopen
        return proc is None or proc.poll() is None or proc.returncode == 0

    def _close(self, replay_id: str) -> bool:
        proc = self._open.pop(replay_id, None)
        if proc is None:
            return False
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return True

    def close(self) -> None:
        for replay_id in list(self._open):
            self._close(replay_id)
