"""A label read exactly beside another word read surely ("Patients", the menu, beside
"Patient", a column's heading): no rival, but read again before a click
(docs/grounding.md, rule 4; agent/grounding/text.py, agent/grounding/second_look.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.second_look import near_miss_is_label, near_misses
from agent.grounding.text import Candidate, Word, candidates, decide
from messages.workflow import TargetSpec

DATA = Path(__file__).resolve().parent.parent / "data" / "grounding_web"
SCREEN = (1920, 1080)


def word(text: str, x: int, y: int, line: int, conf: float = 0.95) -> Word:
    return Word(text, conf, (x, y, 8 * len(text), 12), line)


def test_a_label_read_exactly_is_not_ambiguous_with_another_word_read_surely() -> None:
    words = [word("Patients", 100, 10, 0), word("Patient", 300, 160, 1)]
    d = decide(candidates(words, "Patients"), "Patients")
    assert d.chosen is not None and d.chosen.box[0] == 100, d
    # Either read unsurely, it may be a copy misread: a rival, as before.
    unsure = [word("Patients", 100, 10, 0), word("Patient", 300, 160, 1, conf=0.6)]
    assert decide(candidates(unsure, "Patients"), "Patients").error == "ambiguous_target"
    unsure_best = [word("Patients", 100, 10, 0, conf=0.6), word("Patient", 300, 160, 1)]
    assert decide(candidates(unsure_best, "Patients"), "Patients").error == "ambiguous_target"
    # Nothing read exactly: the two are rivals, as before.
    off = [word("Patiens", 100, 10, 0), word("Patient", 300, 160, 1)]
    assert decide(candidates(off, "Patients"), "Patients").error == "ambiguous_target"
    # Two exact copies stay twins.
    twins = [word("Patients", 100, 10, 0), word("Patients", 300, 160, 1)]
    assert decide(candidates(twins, "Patients"), "Patients").error == "ambiguous_target"


def test_the_other_word_is_read_again_and_a_copy_there_stops_the_click() -> None:
    words = [word("Patients", 100, 10, 0), word("Patient", 300, 160, 1)]
    found = candidates(words, "Patients")
    chosen = decide(found, "Patients").chosen
    assert chosen is not None
    (miss,) = near_misses(words, found, chosen, "Patients", 0.8, SCREEN)
    assert miss.read_as == "Patient" and miss.read_score == 0.875
    # Read again as it was: another word, the click goes on.
    same = candidates([word("Patient", 300, 160, 0)], "Patients")
    assert near_miss_is_label(chosen, miss, same, "Patients", 0.8) is None
    # Read again as the label (or unsurely): a copy may stand there, no click.
    for again in ([word("Patients", 300, 160, 0)], [word("Patient", 300, 160, 0, conf=0.5)]):
        d = near_miss_is_label(chosen, miss, candidates(again, "Patients"), "Patients", 0.8)
        assert d is not None and d.error == "ambiguous_target", again


def test_an_ordinary_near_miss_is_judged_as_before() -> None:
    chosen = Candidate("OK", 1.0, 0.95, (100, 100, 16, 12))
    words = [word("OK", 100, 100, 0), word("fe)", 300, 200, 1, conf=0.55)]
    (miss,) = near_misses(words, candidates(words, "OK"), chosen, "OK", 0.8, SCREEN)
    assert miss.read_score == 0.0
    d = near_miss_is_label(chosen, miss, candidates([word("OK", 300, 200, 0)], "OK"), "OK",
                           0.8)
    assert d is not None and d.error == "ambiguous_target"


def test_the_menus_patients_is_clicked_not_the_column_heading(read: Any) -> None:
    """Tuning part: the menu's "Patients" (light on the dark bar, read in its band) and
    the table's heading "Patient"; before, no click (``ambiguous_target``)."""
    name = "tuning-patients-alone-100-recorded.png"
    (screen,) = [s for s in json.loads((DATA / "labels.json").read_text())["screens"]
                 if s["image"] == name]
    (menu,) = [c for c in screen["controls"] if c["text"] == "Patients"]
    image = Image.open(DATA / name).convert("RGB")
    found = resolve_point(TargetSpec(by_text="Patients"), image, (0, 0), (0, 0, *SCREEN),
                          (1.0,), 0.85, TextSettings(read))
    x, y, w, h = menu["box"]
    assert found.found and x <= (found.x or 0) < x + w and y <= (found.y or 0) < y + h, found


def test_a_tabs_title_is_not_clicked_while_the_menu_stands_unread(read: Any) -> None:
    """In a browser window the tab's title reads "Patients" exactly, the heading "Patient"
    is set aside, the menu's "Patients" (light on dark) is not read on the whole monitor:
    the rest is read (bands, ink) before a click, and the two copies are no click. Before,
    the tab's title was clicked."""
    name = "tuning-patients-window-100-recorded.png"
    image = Image.open(DATA / name).convert("RGB")
    found = resolve_point(TargetSpec(by_text="Patients"), image, (0, 0), (0, 0, *SCREEN),
                          (1.0,), 0.85, TextSettings(read))
    assert not found.found and found.error == "ambiguous_target", found
