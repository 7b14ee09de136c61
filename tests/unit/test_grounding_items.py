"""A menu bar's title read again closer (agent/executors/desktop_target.py): when the closer
reading sets the titles tighter than the whole monitor's did, the item is taken from the
whole reading, and a rival in either reading still stops the click."""

from __future__ import annotations

from PIL import Image

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.items import item_by_place
from agent.grounding.text import Word
from messages.workflow import TargetSpec

SIZE = (1920, 1080)


def word(text: str, x: float, y: float, h: float = 12, line: int = 0) -> Word:
    return Word(text, 0.95, (round(x), round(y), round(8 * len(text) * h / 12), round(h)),
                line)


# The whole monitor: "Fichier" and "Edition" a text height apart (two items of a bar).
WHOLE = [word("Fichier", 100, 20), word("Edition", 168, 20)]


def closer(image: Image.Image) -> list[Word]:
    """The whole monitor, or the crop around the bar read at x2 (crop from (76, 12)):
    there the titles come out 2 px apart, one phrase even for items."""
    if image.size == SIZE:
        return WHOLE
    return [word("Fichier", (100 - 76) * 2, (20 - 12) * 2, 24),
            word("Edition", (158 - 76) * 2, (20 - 12) * 2, 24)]


def test_an_item_read_tighter_closer_is_taken_from_the_whole_reading() -> None:
    image = Image.new("RGB", SIZE, "white")
    at = {"x_pct": 128 / SIZE[0], "y_pct": 26 / SIZE[1]}  # the recorded centre of "Fichier"
    found = resolve_point(TargetSpec(by_text="Fichier", **at), image, (0, 0),
                          (0, 0, *SIZE), (1.0,), 0.85, TextSettings(closer))
    assert found.found, found
    assert 100 <= (found.x or 0) <= 156 and 20 <= (found.y or 0) <= 32, found
    # Without the recorded position, text alone never clicks an item.
    alone = resolve_point(TargetSpec(by_text="Fichier"), image, (0, 0), (0, 0, *SIZE),
                          (1.0,), 0.85, TextSettings(closer))
    assert not alone.found and alone.error == "target_not_found", alone


def test_a_rival_in_the_other_reading_still_stops_the_item() -> None:
    elsewhere = [word("Fichier", 500, 600, line=3), word("joint", 560, 600, line=3)]
    d = item_by_place(WHOLE, "Fichier", 0.8, 0.15, (128, 26), None, also=elsewhere)
    assert d.chosen is None and d.error == "ambiguous_target", d
    assert item_by_place(WHOLE, "Fichier", 0.8, 0.15, (128, 26), None).chosen is not None
