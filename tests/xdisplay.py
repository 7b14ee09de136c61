"""A real X display with several monitors, for tests on a machine with no screen.

``xdisplay(monitors=[(w, h, x, y), ...], window_manager=False) -> ":N"`` (a pytest fixture
returning that factory) starts Xvfb on a free display number (``-displayfd``: parallel tests
never collide), declares one RandR 1.5 monitor per tuple with xrandr (the first is the
primary) and returns the DISPLAY string. ``window_manager=True`` also starts openbox, which
the active-window title needs (``_NET_ACTIVE_WINDOW``). Everything is stopped at teardown.
X11 has no negative origins: the
root window starts at (0, 0), so a monitor left of the primary is at x=0 and the primary
further right; negative origins (Windows) are covered by unit tests.

Outside pytest, :func:`start_xdisplay` returns an :class:`XDisplay` to ``close()``.
Debian packages: xvfb, x11-xserver-utils (xrandr), openbox (scripts/test installs them).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest

MonitorSpec = tuple[int, int, int, int]
"""``(w, h, x, y)`` of one monitor in root-window pixels."""

READY_TIMEOUT_S = 10.0
PACKAGES = "xvfb x11-xserver-utils openbox"


class XDisplayError(RuntimeError):
    """The display could not be started (a tool missing, Xvfb failed, xrandr refused)."""


@dataclass
class XDisplay:
    display: str
    monitors: list[MonitorSpec]
    server: subprocess.Popen[bytes]
    window_manager: subprocess.Popen[bytes] | None = None
    extra: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self, **more: str) -> dict[str, str]:
        """This process's environment with DISPLAY pointing here."""
        return {**os.environ, "DISPLAY": self.display, **more}

    def close(self) -> None:
        for proc in (*self.extra, self.window_manager, self.server):
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in (*self.extra, self.window_manager, self.server):
            if proc is None:
                continue
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, even by SIGKILL (Linux prctl), so
    no server outlives a crashed pytest run."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise XDisplayError(f"{tool} not found: install the Debian packages {PACKAGES}"
                            " (scripts/test does)")
    return path


def _read_display_number(fd: int, server: subprocess.Popen[bytes]) -> str:
    deadline, data = time.monotonic() + READY_TIMEOUT_S, b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or server.poll() is not None:
            raise XDisplayError(f"the X server did not start (exit {server.poll()}, read"
                                f" {data!r})")
        ready, _, _ = select.select([fd], [], [], min(left, 0.1))
        if ready:
            chunk = os.read(fd, 64)
            if not chunk:
                raise XDisplayError(f"the X server closed -displayfd early (exit "
                                    f"{server.poll()})")
            data += chunk
    return f":{int(data.strip())}"


def _xrandr(display: str, *args: str) -> None:
    done = subprocess.run([_need("xrandr"), *args], env={**os.environ, "DISPLAY": display},
                          capture_output=True, timeout=10, check=False)
    if done.returncode != 0:
        raise XDisplayError(f"xrandr {' '.join(args)} failed: {done.stderr.decode()[:500]}")


_WM_CHECK = """
import sys, time
from Xlib import display
conn = display.Display(sys.argv[1])
root, atom = conn.screen().root, conn.intern_atom("_NET_SUPPORTING_WM_CHECK")
deadline = time.monotonic() + float(sys.argv[2])
while root.get_full_property(atom, 0) is None:
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.02)
"""


def _wait_for_window_manager(display: str, wm: subprocess.Popen[bytes]) -> None:
    # In a child process: python-xlib keeps per-class extension state, and a connection to
    # a server without RandR (randr=False) breaks every later connection of this process.
    done = subprocess.run([sys.executable, "-c", _WM_CHECK, display, str(READY_TIMEOUT_S)],
                          capture_output=True, timeout=READY_TIMEOUT_S + 30, check=False)
    if done.returncode != 0 or wm.poll() is not None:
        raise XDisplayError(f"openbox did not start (exit {wm.poll()}): "
                            f"{done.stderr.decode(errors='replace')[-500:]}")


def start_x_server(argv: list[str]) -> tuple[str, subprocess.Popen[bytes]]:
    """Start an X server (``argv`` without ``-displayfd``) on a free display number: its
    ``:N`` and its process, stopped with the test process."""
    read_fd, write_fd = os.pipe()
    try:
        server = subprocess.Popen(
            [argv[0], "-displayfd", str(write_fd), *argv[1:]],
            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent)
        os.close(write_fd)
        try:
            display = _read_display_number(read_fd, server)
        except BaseException:
            server.kill()
            server.wait()
            raise
    finally:
        os.close(read_fd)
    return display, server


def start_xdisplay(monitors: Sequence[MonitorSpec], window_manager: bool = False,
                   randr: bool = True) -> XDisplay:
    """Start Xvfb with these monitors (first = primary); see the module docstring.
    ``randr=False``: one screen and no RandR extension, so its monitors cannot be listed
    (what an agent sees when it cannot list its monitors)."""
    if not monitors or (not randr and len(monitors) > 1):
        raise ValueError("at least one monitor, and only one without RandR")
    for w, h, x, y in monitors:
        if w <= 0 or h <= 0 or x < 0 or y < 0:
            raise ValueError(f"monitor {(w, h, x, y)}: sizes > 0 and origins >= 0 on X11")
    width = max(x + w for w, h, x, y in monitors)
    height = max(y + h for w, h, x, y in monitors)
    display, server = start_x_server([_need("Xvfb"), "-screen", "0", f"{width}x{height}x24",
                                      "-nolisten", "tcp", "-noreset",
                                      *(() if randr else ("-extension", "RANDR"))])
    result = XDisplay(display, list(monitors), server)
    try:
        for i, (w, h, x, y) in enumerate(monitors if randr else ()):
            mm_w, mm_h = round(w * 25.4 / 96), round(h * 25.4 / 96)  # 96 dpi
            name = f"{'*' if i == 0 else ''}MON{i + 1}"
            _xrandr(display, "--setmonitor", name, f"{w}/{mm_w}x{h}/{mm_h}+{x}+{y}", "none")
        # Without turning Xvfb's one output off (and setting the framebuffer's size),
        # screeninfo sees one monitor, not the RandR monitors set above.
        if randr:
            _xrandr(display, "--output", "screen", "--off", "--fb", f"{width}x{height}")
        if window_manager:
            result.window_manager = subprocess.Popen(
                [_need("openbox"), "--sm-disable"], env=result.env(),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_die_with_parent)
            _wait_for_window_manager(display, result.window_manager)
    except BaseException:
        result.close()
        raise
    return result


def relayout(display: str, old: Sequence[MonitorSpec], new: Sequence[MonitorSpec]) -> None:
    """Unplug the ``old`` monitors of :func:`start_xdisplay` and plug ``new`` ones (the first
    primary) on the running display, inside its frame buffer: a monitor unplugged, replaced
    or renumbered between a recording and its replay."""
    for i in range(len(old)):
        _xrandr(display, "--delmonitor", f"MON{i + 1}")
    for i, (w, h, x, y) in enumerate(new):
        mm_w, mm_h = round(w * 25.4 / 96), round(h * 25.4 / 96)
        _xrandr(display, "--setmonitor", f"{'*' if i == 0 else ''}NEW{i + 1}",
                f"{w}/{mm_w}x{h}/{mm_h}+{x}+{y}", "none")


XDisplayFactory = Callable[..., str]


@pytest.fixture
def xdisplay() -> Iterator[XDisplayFactory]:
    """``xdisplay([(w, h, x, y), ...], window_manager=False, randr=True) -> ":N"``; stopped
    at teardown."""
    started: list[XDisplay] = []

    def factory(monitors: Sequence[MonitorSpec], window_manager: bool = False,
                randr: bool = True) -> str:
        try:
            started.append(start_xdisplay(monitors, window_manager, randr))
        except XDisplayError as exc:
            pytest.fail(str(exc))
        return started[-1].display

    yield factory
    for d in reversed(started):
        with contextlib.suppress(Exception):
            d.close()
