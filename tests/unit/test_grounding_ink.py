"""Unread ink, links cut at their underlines, a control under its block's heading
(agent/grounding/ink.py, agent/grounding/near.py; docs/grounding.md, "Unread ink" and
"Which row"), on synthetic images and on recorded Chromium screens."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.ink import (
    covering,
    split_at_underlines,
    stretched,
    unread,
    with_its_row,
)
from agent.grounding.near import under_heading
from agent.grounding.text import Candidate, Word, phrases
from messages.workflow import TargetSpec
from tests.unit.test_grounding_web import inside as _inside
from tests.unit.test_grounding_web import screen as _screen

DATA = Path(__file__).resolve().parent.parent / "data" / "grounding_web"
SCALES = (1.0, 0.95, 1.05, 0.9, 1.1, 0.8, 1.25)


def test_ink_no_word_covers_is_found_and_rules_are_not() -> None:
    shot = Image.new("RGB", (600, 200), "white")
    draw = ImageDraw.Draw(shot)
    draw.text((40, 40), "Annuaire", fill="#9aa3ad")  # light grey, unread
    draw.text((40, 100), "Patients", fill="black")  # read
    draw.line((0, 160, 599, 160), fill="black")  # a rule: not text
    read = [Word("Patients", 0.95, (40, 100, 50, 11), 0)]
    places = unread(shot, [w.box for w in read])
    assert len(places) == 1, places
    left, top, w, h = places[0]
    assert left <= 40 and top <= 40 and left + w >= 80 and top + h >= 48, places


def test_a_filled_button_beside_other_text_is_read_apart(read: Any) -> None:
    """White on blue beside black on white: read as one place, the button's text is lost
    (the place is mostly light, not inverted); its fill is a place of its own."""
    name = "tuning-patients-alone-100-recorded.png"
    (c,) = [c for c in _screen(name)["controls"] if c["text"] == "Rechercher"]
    found = resolve_point(TargetSpec(by_text="Rechercher"),
                          Image.open(DATA / name).convert("RGB"), (0, 0),
                          (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
    assert found.found and _inside(c["box"], found.x, found.y), found


def test_a_place_dimmed_is_not_read() -> None:
    shot = Image.new("RGB", (300, 100), "white")
    ImageDraw.Draw(shot).text((40, 40), "Annuaire", fill="black")
    assert unread(shot, [], skip=lambda box: True) == []


def test_light_text_comes_out_dark_on_light() -> None:
    grey = Image.new("RGB", (60, 20), "#f4f6f8")
    ImageDraw.Draw(grey).rectangle((10, 5, 40, 12), fill="#9aa3ad")
    out = stretched(grey)
    assert out.getpixel((20, 8)) == 0 and out.getpixel((2, 2)) == 255
    blue = Image.new("RGB", (60, 20), "#1565c0")
    ImageDraw.Draw(blue).rectangle((10, 5, 40, 12), fill="white")
    out = stretched(blue)
    assert out.getpixel((20, 8)) == 0 and out.getpixel((2, 2)) == 255


def _links(gap_underlined: bool) -> tuple[Image.Image, list[Word]]:
    shot = Image.new("RGB", (300, 60), "white")
    draw = ImageDraw.Draw(shot)
    draw.text((20, 20), "Repondre", fill="black")
    draw.text((90, 20), "Archiver", fill="black")
    if gap_underlined:
        draw.line((20, 34, 140, 34), fill="black")
    else:
        draw.line((20, 34, 80, 34), fill="black")
        draw.line((90, 34, 140, 34), fill="black")
    return shot, [Word("Repondre", 0.9, (20, 22, 60, 10), 0),
                  Word("Archiver", 0.9, (90, 22, 50, 10), 0)]


def test_two_links_are_cut_at_the_gap_between_their_underlines() -> None:
    shot, words = _links(gap_underlined=False)
    assert len(phrases(split_at_underlines(shot, words))) == 2
    shot, words = _links(gap_underlined=True)  # one link of two words
    assert len(phrases(split_at_underlines(shot, words))) == 1


def _skipped_ink(draw: ImageDraw.ImageDraw, left: int, right: int, descenders: list[int]) -> None:
    """An underline at row 34 from ``left`` to ``right``, broken as Chromium breaks it
    around each descender: the descender crosses the line at ``x``, its foot under it,
    and the line stops three pixels on each side."""
    x0 = left
    for x in descenders:
        draw.line((x0, 34, x - 4, 34), fill="black")
        draw.rectangle((x, 28, x + 1, 37), fill="black")
        x0 = x + 5
    draw.line((x0, 34, right, 34), fill="black")


def test_white_text_on_a_filled_button_has_no_underline_to_cut_at() -> None:
    """Its letters' middle row looked like an underline under each word, with a gap
    between two words: "Valider les" and "résultats" were cut into two phrases and the
    button was not found (before: ``target_not_found``)."""
    shot = Image.open(DATA / "tuning-labo-alone-100-moved.png").convert("RGB")
    words = [Word("Valider", 0.97, (330, 494, 42, 11), 0), Word("les", 0.96, (377, 494, 17,
                                                                            11), 0),
             Word("résultats", 0.96, (399, 494, 52, 11), 0)]
    assert {w.line for w in split_at_underlines(shot, words)} == {0}


def test_an_underline_broken_by_descenders_still_parts_two_links() -> None:
    """"Page précédente Page suivante" at 100 %: each "Page"'s underline is broken around
    its "g"; before, neither was an underline and the four words stayed one phrase."""
    shot = Image.new("RGB", (300, 60), "white")
    draw = ImageDraw.Draw(shot)
    for left in (20, 90):
        draw.text((left, 20), "Page", fill="black")
    _skipped_ink(draw, 20, 80, [40])
    _skipped_ink(draw, 90, 140, [110])
    words = [Word("Page", 0.9, (20, 22, 60, 10), 0), Word("suivante", 0.9, (90, 22, 50, 10), 0)]
    assert len(phrases(split_at_underlines(shot, words))) == 2
    # One link, its underline broken by a descender at the space between its words: one.
    one = Image.new("RGB", (300, 60), "white")
    _skipped_ink(ImageDraw.Draw(one), 20, 140, [40, 84])
    assert len(phrases(split_at_underlines(one, words))) == 1


def _c(top: int, left: int = 100) -> Candidate:
    return Candidate("Modifier", 1.0, 0.9, (left, top, 60, 14))


def test_under_a_heading_the_nearest_copy_if_nearer_than_the_pitch() -> None:
    copies = [_c(160), _c(270), _c(380)]
    heading = Candidate("Amoxicilline", 1.0, 0.9, (100, 100, 120, 16))
    assert under_heading(heading, copies) is copies[0]
    # The own block's copy misread: the next block's is a pitch away, not taken.
    assert under_heading(heading, copies[1:]) is None
    # Another column's copy is no copy of this block.
    assert under_heading(heading, [_c(160, left=900), _c(270, left=900)]) is None
    # The second link of a row that starts under the heading is in its column.
    links = [_c(160, left=170), _c(270, left=170)]
    row = [Word("Répondre", 0.9, (100, 160, 60, 14), 0),
           Word("Modifier", 0.9, (170, 160, 60, 14), 0)]
    assert under_heading(heading, links) is None
    assert under_heading(heading, links, row) is links[0]


@pytest.mark.parametrize("label", ["Répondre", "Archiver"])
def test_a_messages_link_is_chosen_by_its_author(read: Any, label: str) -> None:
    """"Archiver" starts under the author's name only with its row ("Répondre Archiver"):
    before, it was in no column of the heading (``target_not_found``)."""
    name = "tuning-inbox-alone-100-recorded.png"
    for c in [c for c in _screen(name)["controls"] if c["text"] == label][:2]:
        found = resolve_point(TargetSpec(by_text=label, near_text=c["row"]),
                              Image.open(DATA / name).convert("RGB"), (0, 0),
                              (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
        assert found.found and _inside(c["box"], found.x, found.y), found


@pytest.mark.parametrize("label", ["Mes patients", "Aide en ligne"])
def test_a_light_grey_link_is_found(read: Any, label: str) -> None:
    name = "tuning-patients-alone-100-recorded.png"
    (c,) = [c for c in _screen(name)["controls"] if c["text"] == label]
    found = resolve_point(TargetSpec(by_text=label), Image.open(DATA / name).convert("RGB"),
                          (0, 0), (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
    assert found.found and _inside(c["box"], found.x, found.y), found


@pytest.mark.parametrize("label", ["Mes patients", "Comptes rendus"])
def test_a_light_grey_link_read_as_nonsense_is_read_apart(read: Any, label: str) -> None:
    """In a browser window at 100 %, the page's light background read as a band gives the
    side menu's links as nonsense at a confidence near 0 ("SINEEMENLE"): that reading
    covered their ink, so it was never read apart (before: ``target_not_found``)."""
    name = "tuning-patients-window-100-recorded.png"
    (c,) = [c for c in _screen(name)["controls"] if c["text"] == label]
    found = resolve_point(TargetSpec(by_text=label), Image.open(DATA / name).convert("RGB"),
                          (0, 0), (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
    assert found.found and _inside(c["box"], found.x, found.y), found


def test_unread_ink_between_words_of_a_link_is_read_with_them(read: Any) -> None:
    """"Aide en ligne" read as "Aide en", an unread "n li" and "ligne", boxed short: the
    piece of ink alone read as "n" and "ic" (before: ``target_not_found``)."""
    name = "tuning-patients-window-100-recorded.png"
    (c,) = [c for c in _screen(name)["controls"] if c["text"] == "Aide en ligne"]
    found = resolve_point(TargetSpec(by_text="Aide en ligne"),
                          Image.open(DATA / name).convert("RGB"), (0, 0), (0, 0, 1920, 1080),
                          SCALES, 0.85, TextSettings(read))
    assert found.found and _inside(c["box"], found.x, found.y), found


def test_a_place_takes_the_words_of_its_row_it_touches() -> None:
    words = [Word("Aide", 0.83, (63, 263, 26, 10), 0), Word("en", 0.97, (95, 266, 9, 8), 0),
             Word("ligne", 0.97, (120, 266, 22, 10), 0),
             Word("Annuaire", 0.96, (63, 242, 54, 10), 1),  # the row above
             Word("Patient", 0.96, (334, 263, 45, 11), 0)]  # far along the row
    assert with_its_row((103, 258, 21, 21), words) == (63, 258, 79, 21)


def test_a_word_read_unsurely_covers_no_ink() -> None:
    words = [Word("SINEEMENLE", 0.0, (40, 40, 60, 10), 0), Word("Patients", 0.95,
                                                              (40, 100, 50, 11), 1)]
    assert covering(words) == [(40, 100, 50, 11)]


def test_an_anchor_among_many_rows_alike_never_clicks_another_row(read: Any) -> None:
    """Ten messages alike: the anchor cut around one "Répondre" once matched another row
    "uniquely", for the true row was not among the coarse peaks refined."""
    name = "tuning-inbox-alone-125-recorded.png"
    shot = Image.open(DATA / name).convert("RGB")
    for c in [c for c in _screen(name)["controls"] if c["text"] == "Répondre"]:
        x, y, w, h = c["box"]
        out = io.BytesIO()
        shot.crop((x - 40, y - 10, x + w + 40, y + h + 10)).save(out, "PNG")
        spec = TargetSpec(by_text="Répondre", x_pct=(x + w / 2) / 1920,
                          y_pct=(y + h / 2) / 1080,
                          anchor_image_base64=base64.b64encode(out.getvalue()).decode())
        found = resolve_point(spec, shot, (0, 0), (0, 0, 1920, 1080), SCALES, 0.85,
                              TextSettings(read))
        assert not found.found or _inside(c["box"], found.x, found.y), (c, found)


@pytest.mark.parametrize("name", ["tuning-form-alone-100-moved.png",
                                  "tuning-form-alone-150-recorded.png"])
def test_a_label_wrapped_on_three_lines_is_found(read: Any, name: str) -> None:
    """At 150 % the first line read short ("\\/alinlar at", 11 px high) stood farther
    under the next than 0.8 of its height: the stack had two lines of three."""
    label = "Valider et envoyer au secrétariat"
    (c,) = [c for c in _screen(name)["controls"] if c["text"] == label]
    found = resolve_point(TargetSpec(by_text=label), Image.open(DATA / name).convert("RGB"),
                          (0, 0), (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
    assert found.found and _inside(c["box"], found.x, found.y), found
