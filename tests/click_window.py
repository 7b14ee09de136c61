"""The click-target window (tests/fixtures/click_target.py) seen from a test: start it on a
display, read what reached it, and where its drawn button and text field are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.xdisplay import XDisplay

FIXTURES = Path(__file__).resolve().parent / "fixtures"
BUTTON = (60, 50, 200, 100)
"""click_target.BUTTON: the drawn button, canvas pixels (left, top, right, bottom)."""
BUTTON_BLUE = (0x2A, 0x6F, 0xDB)


class Target:
    """The click-target window: its log and where its canvas and field are."""

    def __init__(self, display: XDisplay | str, tmp: Path, title: str, x: int, y: int,
                 then: tuple[str, int] | None = None, on_click: str | None = None) -> None:
        """``then``: the first click closes it and opens that window after that many ms;
        ``on_click``: a shell command run at the first click (tests/fixtures/click_target.py)."""
        self.log = tmp / f"{title}.jsonl"
        more = ([] if then is None else ["--then", then[0], str(then[1])]) + (
            [] if on_click is None else ["--on-click", on_click])
        self.proc = subprocess.Popen(
            [sys.executable, str(FIXTURES / "click_target.py"), title, str(x), str(y), "600",
             "400", str(self.log), *more], env=_env(display), stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        layout = json.loads(self.proc.stdout.readline())
        self.canvas: list[int] = layout["canvas"]
        self.entry: list[int] = layout["entry"]
        time.sleep(0.2)  # the first frame is drawn

    def events(self, kind: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == kind]

    def button_centre(self) -> tuple[float, float]:
        left, top, right, bottom = BUTTON
        return self.canvas[0] + (left + right) / 2, self.canvas[1] + (top + bottom) / 2

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


def _env(display: XDisplay | str) -> dict[str, str]:
    name = display if isinstance(display, str) else display.display
    return {**os.environ, "DISPLAY": name}
