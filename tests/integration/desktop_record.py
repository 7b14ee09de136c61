"""A patient record on a real X display (tests/fixtures/patient_banner.py) and the tree
with a desktop agent (Tesseract) on that display: what the identity check's and the
read_text step's tests on real screens share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.system import System
from tests.xdisplay import XDisplayFactory

FORM = Path(__file__).resolve().parent.parent / "fixtures" / "patient_banner.py"

Monitor = tuple[int, int, int, int]
"""``(w, h, x, y)``, as tests/xdisplay.py takes them."""


class Record:
    """The patient record on a display: where its banner (and value) is, and what was
    typed into it."""

    def __init__(self, display: str, tmp: Path, banner: str, x: int = 100, y: int = 80,
                 value: str | None = None) -> None:
        self.log = tmp / "typed.jsonl"
        argv = [sys.executable, str(FORM), banner, str(x), str(y), str(self.log)]
        self.proc = subprocess.Popen([*argv, *([value] if value is not None else [])],
                                     env={**os.environ, "DISPLAY": display},
                                     stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.layout: dict[str, Any] = json.loads(self.proc.stdout.readline())

    def region(self, part: str = "banner", monitor: Monitor | None = None) -> dict[str, float]:
        """``part`` as a region of ``monitor`` (the whole screen if None), with some margin
        (as an author draws it)."""
        x, y, w, h = self.layout[part]
        mw, mh, mx, my = monitor or (*self.layout["screen"], 0, 0)
        return {"x_pct": max(0, x - mx - 10) / mw, "y_pct": max(0, y - my - 10) / mh,
                "w_pct": (w + 20) / mw, "h_pct": (h + 20) / mh}

    def typed(self) -> list[str]:
        if not self.log.exists():
            return []
        return [json.loads(line)["text"] for line in self.log.read_text().splitlines()]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


def desktop_tree(xdisplay: XDisplayFactory, monitors: list[Monitor], spawn: Spawn,
                 lea_env: dict[str, str], tmp_path: Path) -> tuple[System, str, Path]:
    """An X display of ``monitors`` with a window manager, the tree, and an agent ``ws1``
    with the desktop executor on that display, once it said hello: ``(system, display,
    tmp_path)``."""
    display = xdisplay(monitors, window_manager=True)
    system = System(spawn, lea_env, tmp_path, extra_env={
        "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60", "LEA_BEACON_TIMEOUT_S": "60",
        "LEA_HEARTBEAT_LIVENESS": "10", "RPA_LOOP_DETECTOR_ENABLED": "false"})
    spawn(python_argv("-m", "agent", "--machine-id", "ws1", "--executor", "desktop",
                      "--data-dir", str(tmp_path / "agent-data")),
          env={**system.env, "DISPLAY": display}, name="agent-ws1")
    wait_until(lambda: any("dispatcher answered hello" in log.read_text(errors="replace")
                           for log in tmp_path.glob("agent-ws1-*.log")), timeout=60)
    return system, display, tmp_path
