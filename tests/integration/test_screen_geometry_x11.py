"""Monitors, focus and active window title on a real X display (Xvfb + RandR monitors)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.screen import geometry
from messages.monitor import Monitor
from tests.conftest import Spawn, wait_until
from tests.xdisplay import XDisplayFactory

TITLED_WINDOW = Path(__file__).resolve().parent.parent / "fixtures" / "titled_window.py"


@pytest.fixture
def on_display(monkeypatch: pytest.MonkeyPatch, xdisplay: XDisplayFactory) -> Iterator[
        XDisplayFactory]:
    """Start a display and point this process at it."""

    def start(monitors: list[tuple[int, int, int, int]], window_manager: bool = False) -> str:
        display = xdisplay(monitors, window_manager)
        monkeypatch.setenv("DISPLAY", display)
        return display

    yield start


def warp_pointer(x: int, y: int) -> None:
    from Xlib import display as xdisplay

    conn = xdisplay.Display()
    try:
        conn.screen().root.warp_pointer(x, y)
        conn.sync()
    finally:
        conn.close()


def open_window(spawn: Spawn, display: str, title: str, x: int, y: int) -> subprocess.Popen[bytes]:
    proc = spawn([sys.executable, str(TITLED_WINDOW), title, str(x), str(y), "400", "300"],
                 env={**os.environ, "DISPLAY": display}, name="window",
                 stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def test_two_monitors_are_listed_with_names_and_primary(on_display: XDisplayFactory) -> None:
    on_display([(1280, 1024, 0, 0), (1920, 1080, 1280, 0)])
    assert geometry.monitors_geometry() == [
        Monitor(idx=0, x=0, y=0, w=1280, h=1024, primary=True, name="MON1"),
        Monitor(idx=1, x=1280, y=0, w=1920, h=1080, primary=False, name="MON2"),
    ]


def test_three_monitors_primary_first_whatever_its_place(on_display: XDisplayFactory) -> None:
    """The primary is the middle screen here (X11 cannot have negative origins: a screen
    left of the primary sits at x=0): idx 0 is still the primary, then left to right."""
    on_display([(1920, 1080, 1280, 0), (1280, 1024, 0, 56), (1024, 768, 3200, 0)])
    found = geometry.monitors_geometry()
    assert [(m.idx, m.rect, m.primary, m.name) for m in found] == [
        (0, (1280, 0, 1920, 1080), True, "MON1"),
        (1, (0, 56, 1280, 1024), False, "MON2"),
        (2, (3200, 0, 1024, 768), False, "MON3"),
    ]


def test_without_a_window_manager_the_pointer_gives_the_focus(
        on_display: XDisplayFactory) -> None:
    on_display([(1280, 1024, 0, 0), (1920, 1080, 1280, 0), (1024, 768, 3200, 0)])
    monitors = geometry.monitors_geometry()
    for (x, y), expected in (((100, 100), 0), ((2000, 500), 1), ((3300, 700), 2),
                             ((1279, 1023), 0), ((1280, 0), 1)):
        warp_pointer(x, y)
        assert geometry.pointer_position() == (x, y)
        assert geometry.focused_monitor(monitors, geometry.active_window_rect(),
                                        geometry.pointer_position()) == expected


def test_active_window_title_and_its_monitor(on_display: XDisplayFactory,
                                             spawn: Spawn) -> None:
    display = on_display([(1280, 1024, 0, 0), (1920, 1080, 1280, 0)], window_manager=True)
    monitors = geometry.monitors_geometry()
    warp_pointer(10, 10)  # the pointer on monitor 0: the window must win over it
    open_window(spawn, display, "Dossier patient — Éasily", 1600, 200)
    wait_until(lambda: geometry.active_window_title() == "Dossier patient — Éasily", 10)
    rect = geometry.active_window_rect()
    assert rect is not None and rect[0] >= 1280
    assert geometry.focused_monitor(monitors, rect, geometry.pointer_position()) == 1
    open_window(spawn, display, "Imagerie", 200, 200)
    wait_until(lambda: geometry.active_window_title() == "Imagerie", 10)
    assert geometry.focused_monitor(monitors, geometry.active_window_rect(), None) == 0


def test_a_window_no_longer_on_screen_is_not_in_front(on_display: XDisplayFactory,
                                                     spawn: Spawn) -> None:
    """Withdrawn (closed, minimised) with no other window to take its place: openbox still
    names it active, and it used to be read as the window in front."""
    from Xlib import display as xdisplay

    display = on_display([(1280, 1024, 0, 0)], window_manager=True)
    open_window(spawn, display, "Dossier patient", 100, 100)
    wait_until(lambda: geometry.foreground().title == "Dossier patient", 10)
    conn = xdisplay.Display()
    try:
        root = conn.screen().root
        (active,) = root.get_full_property(conn.intern_atom("_NET_ACTIVE_WINDOW"), 0).value
        conn.create_resource_object("window", int(active)).unmap()
        conn.sync()
        assert wait_until(lambda: geometry.foreground().blocker == "no_foreground_window", 10)
        assert geometry.active_window_title() is None
        assert root.get_full_property(conn.intern_atom("_NET_ACTIVE_WINDOW"), 0).value[0] \
            == active  # what the window manager says, and what is not believed
    finally:
        conn.close()


def test_no_display_means_no_geometry_and_no_title(monkeypatch: pytest.MonkeyPatch,
                                                   xdisplay: XDisplayFactory) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    assert geometry.monitors_geometry() == []
    assert geometry.active_window_title() is None
    assert geometry.pointer_position() is None
    # a display that existed and is gone (its number may be reused later)
    display = xdisplay([(800, 600, 0, 0)])
    monkeypatch.setenv("DISPLAY", display)
    assert len(geometry.monitors_geometry()) == 1
    monkeypatch.setenv("DISPLAY", ":4242")
    assert geometry.monitors_geometry() == []


def test_the_desktop_probe_reports_what_a_heartbeat_carries(
        on_display: XDisplayFactory, spawn: Spawn) -> None:
    from agent.screen.probe import DesktopProbe

    display = on_display([(1280, 1024, 0, 0), (1920, 1080, 1280, 0)], window_manager=True)
    probe = DesktopProbe()
    monitors = probe.monitors()
    assert [m.name for m in monitors] == ["MON1", "MON2"]
    open_window(spawn, display, "Prescription", 1700, 300)
    wait_until(lambda: probe.focus(monitors) == (1, "Prescription"), 10)
    assert probe.focus([]) == (None, "Prescription")  # no geometry: no index
