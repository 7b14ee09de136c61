"""A Windows desktop with two monitors, under Wine, for the desktop executor's Windows tests.

``win_desk`` (a session fixture) -> :class:`WinDesk`:

- an X server with two real monitors: Xorg with the ``dummy`` driver, one screen and two
  RandR outputs placed with xrandr (Xvfb cannot place monitors; docs/windows-agent.md, "The
  Windows tests, under Wine").
  Wine makes the RandR primary its ``\\\\.\\DISPLAY1`` at (0, 0), 1920x1080, and the other
  output, left of it, ``\\\\.\\DISPLAY2`` at **(-1280, 0)**, 1280x1024;
- a WINEPREFIX of its own (its DPI is changed, and its desktop lives on that X server; the
  agent tests' prefix stays untouched) and the agent folder of ``cli/bundle.py``, whose
  Windows python runs the two programs below;
- :meth:`WinDesk.target`: a Win32 window recording clicks and its EDIT control's text
  (tests/fixtures/win_target.py); :meth:`WinDesk.executor`: the agent's
  ``DesktopExecutor`` in that Windows python, driven over a pipe
  (tests/fixtures/win_executor.py); :meth:`WinDesk.set_dpi`: Wine's ``LogPixels``.

Xorg runs as root (CI does). Debian packages: xserver-xorg-core xserver-xorg-video-dummy
x11-xserver-utils (scripts/test installs them with Wine).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from tests.wine import Wine, WineBundle, make_bundle, make_wine, require_wine, windows_path
from tests.xdisplay import XDisplay, XDisplayError, start_x_server

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PRIMARY = (0, 0, 1920, 1080)
LEFT = (-1280, 0, 1280, 1024)
"""The two monitors as Windows numbers them (x, y, w, h): the agent's idx 0 and 1."""
XORG_PACKAGES = "xserver-xorg-core xserver-xorg-video-dummy x11-xserver-utils"
ANSWER_TIMEOUT_S = 120.0
XORG_CONF = """\
Section "ServerFlags"
    Option "AutoAddDevices" "false"
EndSection
Section "Device"
    Identifier "d0"
    Driver "dummy"
    VideoRam 256000
EndSection
Section "Monitor"
    Identifier "m0"
    HorizSync 5.0-1000.0
    VertRefresh 5.0-200.0
EndSection
Section "Screen"
    Identifier "s0"
    Device "d0"
    Monitor "m0"
    DefaultDepth 24
    SubSection "Display"
        Depth 24
        Virtual 3200 1080
    EndSubSection
EndSection
"""


def start_two_monitors(tmp: Path) -> XDisplay:
    """Xorg (dummy driver) with DUMMY0 1920x1080 primary and DUMMY1 1280x1024 left of it."""
    xorg, xrandr = shutil.which("Xorg"), shutil.which("xrandr")
    if xorg is None or xrandr is None:
        raise XDisplayError(f"Xorg or xrandr not found: install {XORG_PACKAGES}")
    if os.geteuid() != 0:
        raise XDisplayError("the two-monitor Xorg (dummy driver) runs as root")
    conf = tmp / "xorg-dummy.conf"
    conf.write_text(XORG_CONF)
    display, server = start_x_server([xorg, "-config", str(conf), "-noreset", "-nolisten",
                                      "tcp", "-logfile", str(tmp / "xorg.log")])
    result = XDisplay(display, [(1920, 1080, 1280, 0), (1280, 1024, 0, 0)], server)
    env = result.env()
    try:
        for args in (["--newmode", "1280x1024_t", "108.00", "1280", "1328", "1440", "1688",
                      "1024", "1025", "1028", "1066", "+hsync", "+vsync"],
                     ["--addmode", "DUMMY1", "1280x1024_t"],
                     ["--output", "DUMMY0", "--mode", "1920x1080", "--pos", "1280x0",
                      "--primary", "--output", "DUMMY1", "--mode", "1280x1024_t", "--pos",
                      "0x0"],
                     # Also makes the server probe its outputs again: without a query like
                     # this one, Wine's RandR handler (GetScreenResourcesCurrent) still saw one
                     # monitor.
                     ["--listmonitors"]):
            done = subprocess.run([xrandr, *args], env=env, capture_output=True, timeout=20,
                                  check=False)
            if done.returncode != 0:
                raise XDisplayError(f"xrandr {args} failed: {done.stderr.decode()[:300]}")
        if b"Monitors: 2" not in done.stdout:
            raise XDisplayError(f"Xorg shows {done.stdout.decode()[:300]!r}, not two monitors")
    except BaseException:
        result.close()
        raise
    return result


class Piped:
    """A Windows program under Wine answering JSON lines on stdout (other lines: its log)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        with open(self.log, "ab") as out:
            for raw in stream:
                out.write(raw)
                out.flush()
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        self.answers.put(json.loads(line))
        self.answers.put(None)

    def answer(self, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        try:
            got = self.answers.get(timeout=timeout)
        except queue.Empty:
            got = None
        if got is None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"no answer from {self.proc.args[1:3]} (exit "
                                 f"{self.proc.poll()}); its output:\n{tail}")
        return got

    def send(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode("utf-8") + b"\n")
        self.proc.stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class WinTarget(Piped):
    """tests/fixtures/win_target.py: where its canvas and EDIT control are, what reached it."""

    def __init__(self, desk: WinDesk, title: str, rect: tuple[int, int, int, int],
                 *flags: str) -> None:
        desk.count += 1
        self.events_path = desk.tmp / f"target-{desk.count}.jsonl"
        super().__init__(desk.python(windows_path(FIXTURES / "win_target.py"), title,
                                     *(str(v) for v in rect), windows_path(self.events_path),
                                     *flags),
                         desk.env(), desk.tmp / f"target-{desk.count}.log")
        layout = self.answer()
        self.hwnd: int = layout["hwnd"]
        self.canvas: list[int] = layout["canvas"]
        self.entry: list[int] | None = layout["entry"]
        self.buttons: dict[str, list[int]] = layout.get("buttons", {})
        self.dpi: int | None = layout["dpi"]

    def events(self, kind: str) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text(encoding="utf-8").splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == kind]


class WinExecutor(Piped):
    """tests/fixtures/win_executor.py: the agent's DesktopExecutor in the Windows python."""

    def __init__(self, desk: WinDesk, config: dict[str, Any]) -> None:
        desk.count += 1
        script = windows_path(FIXTURES / "win_executor.py")
        super().__init__(desk.python(script, json.dumps(config)), desk.env(),
                         desk.tmp / f"executor-{desk.count}.log")
        self.ready = self.answer()

    def ask(self, **request: Any) -> dict[str, Any]:
        answer = self.send(json.dumps(request))
        if "exception" in answer:
            raise AssertionError(answer["traceback"])
        return answer

    def run(self, resolution: dict[str, Any] | None = None, effects: Path | None = None,
            **action: Any) -> dict[str, Any]:
        return self.ask(op="execute", action=action, resolution=resolution,
                        effects=None if effects is None else windows_path(effects))


@dataclass
class WinDesk:
    display: XDisplay
    bundle: WineBundle
    tmp: Path
    count: int = 0
    dpi: int = 96
    executors: dict[str, WinExecutor] = field(default_factory=dict)

    @property
    def wine(self) -> Wine:
        return self.bundle.wine

    def env(self, **more: str) -> dict[str, str]:
        return self.wine.env(DISPLAY=self.display.display, PYTHONUNBUFFERED="1", **more)

    def python(self, *args: str) -> list[str]:
        return ["wine", *self.bundle.python(*args)]

    def target(self, title: str, rect: tuple[int, int, int, int], *flags: str) -> WinTarget:
        return WinTarget(self, title, rect, *flags)

    def executor(self, **config: Any) -> WinExecutor:
        """One executor process per configuration, kept for the session (its Windows
        python takes seconds to import the agent)."""
        key = json.dumps(config, sort_keys=True)
        if key not in self.executors:
            self.executors[key] = WinExecutor(self, config)
        return self.executors[key]

    def set_dpi(self, dpi: int) -> None:
        """Wine's display DPI (``LogPixels``, read when Wine starts): the executors are
        stopped, the setting written (both places Wine reads it), the prefix's wineserver
        stopped; the next program starts Wine again at that DPI. Windows the tests opened
        must be closed first."""
        if dpi == self.dpi:
            return
        self.stop_programs()
        for key in (r"HKCU\Control Panel\Desktop",
                    r"HKLM\System\CurrentControlSet\Hardware Profiles\Current\Software\Fonts"):
            done = self.wine.run(["reg", "add", key, "/v", "LogPixels", "/t", "REG_DWORD",
                                  "/d", str(dpi), "/f"], env=self.env())
            assert done.returncode == 0, done.stdout
        subprocess.run(["wineserver", "-k"], env=self.env(), capture_output=True, timeout=60,
                       check=False)
        subprocess.run(["wineserver", "-w"], env=self.env(), capture_output=True, timeout=60,
                       check=False)
        self.dpi = dpi

    def stop_programs(self) -> None:
        for ex in self.executors.values():
            ex.close()
        self.executors.clear()

    def close(self) -> None:
        self.stop_programs()
        self.wine.close()
        self.display.close()


@pytest.fixture(scope="session")
def win_desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WinDesk]:
    """The Windows desktop of the module docstring, for the whole session."""
    require_wine()
    tmp = tmp_path_factory.mktemp("win-desk")
    try:
        display = start_two_monitors(tmp)
    except XDisplayError as exc:
        pytest.fail(str(exc))
    try:
        wine = make_wine(tmp)
        desk = WinDesk(display, make_bundle(tmp / "lea-agent", wine), tmp)
    except BaseException:
        display.close()
        raise
    yield desk
    desk.close()
