"""Display scaling on Windows (agent/screen/dpi.py, pure): what each DPI awareness sees on a
workstation of two monitors at different scales, and when the agent refuses to click.

The values come from Microsoft's documentation, as docs/windows-scaling.md cites it (no
mixed-DPI Windows machine is available to record them, and Wine gives every monitor the same
DPI): the scale of each DPI (96 = 100 %, 144 = 150 %), GetDpiForMonitor's table (what a
process is told about a monitor, by its awareness), DPI virtualisation (a process that is not
per-monitor aware works at one DPI and Windows scales its coordinates on monitors of
another), the LogicalToPhysicalPointForPerMonitorDPI example (a DPI-unaware process sees a
200 % window in 96-DPI coordinates). Two cases were recorded from the Win32 API under Wine 8
at 144 DPI: a DPI-unaware thread sees the 1920x1080 and 1280x1024 monitors as 1280x720 and
853x683 (GetMonitorInfoW), and its pyautogui.click(960, 540) reaches a window at the physical
(1440, 810), its click(400, 300) at (600, 450) (WM_LBUTTONDOWN in a per-monitor aware window).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from agent.screen.dpi import (
    Awareness,
    DpiReading,
    MonitorDpi,
    describe,
    input_refusal,
    scale_factor,
    scale_percent,
    seen_dpi,
    seen_size,
    to_physical,
)

LAPTOP = (0, 0, 1920, 1080)
"""The laptop's panel at 150 % (144 DPI), primary; physical pixels."""
EXTERNAL = (1920, 0, 1920, 1080)
"""An external monitor at 100 % (96 DPI), right of it."""
ASKED = "SetProcessDpiAwarenessContext(PER_MONITOR_AWARE_V2) refused, error 5"


def reading(awareness: Awareness | None, system: int | None,
            *monitors: tuple[tuple[int, int, int, int], int | None]) -> DpiReading:
    return DpiReading(awareness, system, tuple(MonitorDpi(r, d) for r, d in monitors), ASKED)


MIXED = ((LAPTOP, 144), (EXTERNAL, 96))


@pytest.mark.parametrize(("dpi", "percent"), [(96, 100), (120, 125), (144, 150), (168, 175),
                                              (192, 200)])
def test_the_scales_of_windows_display_settings(dpi: int, percent: int) -> None:
    assert scale_percent(dpi) == percent


def test_only_a_per_monitor_aware_process_is_told_each_monitors_dpi() -> None:
    # GetDpiForMonitor: unaware 96, system aware the system DPI, per-monitor the monitor's.
    told = {a: [seen_dpi(a, dpi, 144) for _r, dpi in MIXED] for a in Awareness}
    assert told == {Awareness.UNAWARE: [96, 96], Awareness.SYSTEM: [144, 144],
                    Awareness.PER_MONITOR: [144, 96]}


def test_what_windows_scales_for_each_awareness_on_the_mixed_workstation() -> None:
    factors = {a: [scale_factor(a, dpi, 144) for _r, dpi in MIXED] for a in Awareness}
    assert factors == {Awareness.PER_MONITOR: [1, 1],
                       Awareness.SYSTEM: [1, Fraction(2, 3)],
                       Awareness.UNAWARE: [Fraction(3, 2), 1]}
    # System aware at 150 %: the 100 % monitor looks larger (its pixels shrunk for the
    # process); unaware: the 150 % panel looks smaller.
    assert seen_size(1920, 1080, Fraction(2, 3)) == (2880, 1620)
    assert seen_size(1920, 1080, Fraction(3, 2)) == (1280, 720)
    # The documentation's example: at 200 % an unaware process works in 96-DPI coordinates.
    assert seen_size(3840, 2160, scale_factor(Awareness.UNAWARE, 192, 96)) == (1920, 1080)
    # Recorded under Wine 8, a DPI-unaware thread at 144 DPI (GetMonitorInfoW).
    assert seen_size(1280, 1024, scale_factor(Awareness.UNAWARE, 144, 144)) == (853, 683)


def test_a_virtualised_click_lands_away_from_its_aim() -> None:
    # An unaware agent aiming at the middle of the 150 % panel as it sees it (1280x720)...
    factor = scale_factor(Awareness.UNAWARE, 144, 144)
    assert to_physical(640, 360, factor) == (960, 540)  # ...is the middle: Windows scales
    # ...but a point it computed from a physical capture (960, 540) lands at (1440, 810),
    # as measured under Wine with (400, 300) landing at (600, 450).
    assert to_physical(960, 540, factor) == (1440, 810)
    assert to_physical(400, 300, factor) == (600, 450)
    assert to_physical(960, 540, scale_factor(Awareness.PER_MONITOR, 144, 96)) == (960, 540)


def test_per_monitor_aware_clicks_on_mixed_scales() -> None:
    assert input_refusal(reading(Awareness.PER_MONITOR, 144, *MIXED)) is None


@pytest.mark.parametrize(("awareness", "system", "scaled"), [
    (Awareness.SYSTEM, 144, "the monitor 1920x1080 at (1920, 0) is at 100 %"),
    (Awareness.SYSTEM, 96, "the monitor 1920x1080 at (0, 0) is at 150 %"),
    (Awareness.UNAWARE, 144, "the monitor 1920x1080 at (0, 0) is at 150 %"),
])
def test_refused_awareness_and_a_scaled_monitor_no_click(awareness: Awareness, system: int,
                                                         scaled: str) -> None:
    why = input_refusal(reading(awareness, system, *MIXED))
    assert why is not None and scaled in why, why
    assert "Windows refused per-monitor DPI awareness" in why and ASKED in why
    assert "a click would not land where the agent aims" in why


def test_refused_awareness_but_nothing_scaled_clicks() -> None:
    """A system-aware agent on monitors all at the system scale, an unaware one on monitors
    all at 100 %: Windows scales nothing, the pixels are the screen's."""
    assert input_refusal(reading(Awareness.SYSTEM, 144, (LAPTOP, 144))) is None
    assert input_refusal(reading(Awareness.UNAWARE, 144, (LAPTOP, 96), (EXTERNAL, 96))) is None


@pytest.mark.parametrize(("case", "expected"), [
    (reading(None, 96, (LAPTOP, 96)), "cannot read its DPI awareness"),
    (reading(Awareness.SYSTEM, None, (LAPTOP, 96)), "at a system scale it cannot read"),
    (reading(Awareness.UNAWARE, 96, (LAPTOP, None)), "the scale of the monitor 1920x1080"),
])
def test_what_cannot_be_read_is_refused(case: DpiReading, expected: str) -> None:
    why = input_refusal(case)
    assert why is not None and expected in why, why


def test_the_status_line() -> None:
    line = describe(reading(Awareness.PER_MONITOR, 144, *MIXED))
    assert line == (f"display scaling: per-monitor DPI aware ({ASKED}); monitors: 1920x1080 "
                    "at (0, 0) 150 %, 1920x1080 at (1920, 0) 100 %")
    refused = describe(reading(Awareness.SYSTEM, 144, *MIXED))
    assert refused.startswith("display scaling: system DPI aware") and \
        "; CLICKS REFUSED: Windows refused" in refused
    assert describe(None).startswith("display scaling: not read")
