"""Numbering monitors and finding the focused one (agent/screen/geometry.py), without a screen."""

from __future__ import annotations

import itertools

from agent.screen.geometry import focused_monitor, merge_sources, monitor_at, number_monitors
from agent.screen.raw_monitor import RawMonitor
from messages.monitor import MAX_MONITORS

# Windows layout: a monitor left of and above the primary has a negative origin.
LEFT = RawMonitor(-1280, -256, 1280, 1024, False, r"\\.\DISPLAY2")
PRIMARY = RawMonitor(0, 0, 1920, 1080, True, r"\\.\DISPLAY1")
RIGHT = RawMonitor(1920, 0, 2560, 1440, False, r"\\.\DISPLAY3")


def test_numbering_never_depends_on_enumeration_order() -> None:
    expected = number_monitors([PRIMARY, LEFT, RIGHT])
    assert [(m.idx, m.x, m.primary) for m in expected] == [(0, 0, True), (1, -1280, False),
                                                            (2, 1920, False)]
    for order in itertools.permutations([PRIMARY, LEFT, RIGHT]):
        assert number_monitors(order) == expected


def test_without_a_known_primary_monitors_go_left_to_right_then_top_to_bottom() -> None:
    below = RawMonitor(0, 1080, 1920, 1080)
    top = RawMonitor(0, 0, 1920, 1080)
    right = RawMonitor(1920, 0, 1920, 1080)
    numbered = number_monitors([right, below, top])
    assert [(m.x, m.y) for m in numbered] == [(0, 0), (0, 1080), (1920, 0)]
    assert not any(m.primary for m in numbered)


def test_mirrors_degenerate_and_surplus_monitors_are_dropped() -> None:
    mirror = RawMonitor(0, 0, 1920, 1080, None, "HDMI-1")
    numbered = number_monitors([PRIMARY, mirror, RawMonitor(5000, 0, 0, 1080)])
    assert len(numbered) == 1 and numbered[0].primary and numbered[0].name == r"\\.\DISPLAY1"
    many = [RawMonitor(i * 100, 0, 100, 100) for i in range(MAX_MONITORS + 4)]
    assert len(number_monitors(many)) == MAX_MONITORS


def test_merge_fills_primary_and_names_from_the_other_sources_by_rectangle() -> None:
    screeninfo = [RawMonitor(0, 0, 1280, 1024), RawMonitor(1280, 0, 1920, 1080)]
    mss = [RawMonitor(1280, 0, 1920, 1080, False), RawMonitor(0, 0, 1280, 1024, True)]
    randr = [RawMonitor(0, 0, 1280, 1024, True, "MON1"),
             RawMonitor(1280, 0, 1920, 1080, False, "MON2")]
    merged = number_monitors(merge_sources(screeninfo, mss, randr))
    assert [(m.idx, m.primary, m.name) for m in merged] == [(0, True, "MON1"),
                                                            (1, False, "MON2")]
    # screeninfo missing or failing: mss alone
    assert merge_sources([], mss, randr)[0].rect == (1280, 0, 1920, 1080)
    assert merge_sources([], [], []) == []


def test_focused_monitor_is_the_one_showing_most_of_the_active_window() -> None:
    monitors = number_monitors([PRIMARY, LEFT, RIGHT])  # 0 primary, 1 left, 2 right
    assert focused_monitor(monitors, (100, 100, 800, 600)) == 0
    assert focused_monitor(monitors, (-1200, -200, 800, 600)) == 1
    # straddling primary and right, mostly on the right
    assert focused_monitor(monitors, (1800, 100, 1000, 600)) == 2
    # straddling left and primary, mostly on the primary
    assert focused_monitor(monitors, (-200, 100, 1000, 600)) == 0


def test_focused_monitor_falls_back_to_the_pointer() -> None:
    monitors = number_monitors([PRIMARY, LEFT, RIGHT])
    assert focused_monitor(monitors, None, (-5, 10)) == 1
    assert focused_monitor(monitors, (0, 0, 0, 0), (2000, 10)) == 2
    # off every screen (a gap below the left monitor): the nearest
    assert focused_monitor(monitors, None, (-600, 900)) == 1
    # a window entirely off-screen: the pointer decides
    assert focused_monitor(monitors, (9000, 9000, 10, 10), (10, 10)) == 0
    assert focused_monitor(monitors) is None
    assert focused_monitor([], (0, 0, 10, 10), (1, 1)) is None


def test_monitor_at_edges() -> None:
    monitors = number_monitors([PRIMARY, RIGHT])
    assert monitor_at(monitors, 1919, 0) == monitors[0]
    assert monitor_at(monitors, 1920, 0) == monitors[1]
    assert monitor_at(monitors, 0, 1080) == monitors[0]  # below the primary: nearest
    assert monitor_at([], 0, 0) is None
