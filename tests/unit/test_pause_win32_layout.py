"""Where the Windows pause window and its controls go (agent/windows/pause_win32.py, pure)."""

from __future__ import annotations

from agent.windows.pause_win32 import crlf, layout

WORK = (0, 0, 1920, 1040)  # a 1080p monitor's work area above a 40 px taskbar


def inside(inner: tuple[int, int, int, int], outer_w: int, outer_h: int) -> bool:
    x, y, w, h = inner
    return x >= 0 and y >= 0 and w > 0 and h > 0 and x + w <= outer_w and y + h <= outer_h


def test_a_short_notice_gets_a_small_window_centred_with_its_controls_inside() -> None:
    places = layout("Appelez le médecin.", 96, WORK, 7, 16)
    x, y, w, h = places["window"]
    assert abs(x + w / 2 - 960) <= 1 and abs(y + h / 2 - 520) <= 1
    for part in ("headline", "text", "button"):
        assert inside(places[part], w, h), (part, places)
    assert places["text"][3] >= 2 * 16


def test_a_long_notice_is_capped_to_the_work_area_and_scrolls_inside() -> None:
    text = crlf("\n".join("x" * 150 for _ in range(400)))
    places = layout(text, 96, WORK, 7, 16)
    _, _, w, h = places["window"]
    assert w <= 1920 * 0.9 and h <= 1040 * 0.9
    assert places["text"][1] + places["text"][3] < places["button"][1]


def test_sizes_follow_the_monitor_dpi() -> None:
    at_100 = layout("Appelez le médecin.", 96, WORK, 7, 16)
    at_150 = layout("Appelez le médecin.", 144, WORK, 10, 24)
    assert at_150["button"][2] == round(at_100["button"][2] * 1.5)
    assert at_150["window"][2] > at_100["window"][2]


def test_line_breaks_are_the_edit_controls() -> None:
    assert crlf("a\nb\r\nc") == "a\r\nb\r\nc"
