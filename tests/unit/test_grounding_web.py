"""Grounding on recorded Chromium screens of a hospital web application
(tests/data/grounding_web, docs/grounding.md): never another row's identical button,
never behind a modal dialog, the row that says which, a dense page's unsure words."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.anchor import find_anchor
from agent.grounding.dimmed import Dimmed
from agent.grounding.second_look import could_be_label
from agent.grounding.text import Word
from messages.workflow import TargetSpec

DATA = Path(__file__).resolve().parent.parent / "data" / "grounding_web"
SCALES = (1.0, 0.95, 1.05, 0.9, 1.1, 0.8, 1.25)


def screen(name: str) -> dict[str, Any]:
    (found,) = [s for s in json.loads((DATA / "labels.json").read_text())["screens"]
                if s["image"] == name]
    return dict(found)


def image(name: str) -> Image.Image:
    return Image.open(DATA / name).convert("RGB")


def anchor(name: str, box: list[int]) -> str:
    x, y, w, h = box
    out = io.BytesIO()
    image(name).crop((x - 40, y - 10, x + w + 40, y + h + 10)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def inside(box: list[int], x: int | None, y: int | None) -> bool:
    return x is not None and y is not None and box[0] <= x < box[0] + box[2] \
        and box[1] <= y < box[1] + box[3]


def test_an_anchor_that_matches_two_places_alike_is_ambiguous() -> None:
    """Two identical patches: the anchor alone cannot say which (before: the first)."""
    shot = Image.new("RGB", (400, 200), "white")
    draw = ImageDraw.Draw(shot)
    for top in (40, 120):
        draw.rectangle((100, top, 180, top + 30), outline="black", fill="#dddddd")
        draw.line((110, top + 15, 170, top + 15), fill="black", width=3)
    match = find_anchor(shot, shot.crop((90, 32, 190, 80)), (1.0,))
    assert match.found and match.ambiguous, match
    spec = TargetSpec(anchor_image_base64=_png(shot.crop((90, 32, 190, 80))))
    found = resolve_point(spec, shot, (0, 0), (0, 0, 400, 200), (1.0,), 0.85)
    assert not found.found and found.error == "ambiguous_target", found


def _png(part: Image.Image) -> str:
    out = io.BytesIO()
    part.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def test_a_modal_backdrop_is_dimmed_and_its_dialog_is_found() -> None:
    name = "tuning-dialog-alone-100-recorded.png"
    dim = Dimmed(image(name))
    controls = screen(name)["controls"]
    assert all(dim.covers(c["box"]) == c["behind"] for c in controls), controls
    (dialog,) = dim.dialogs()
    assert all(inside(dialog, c["box"][0], c["box"][1]) for c in controls if not c["behind"])


def test_nothing_dimmed_on_a_page_without_a_dialog() -> None:
    name = "tuning-form-alone-125-recorded.png"
    dim = Dimmed(image(name))
    assert not any(dim.covers(c["box"]) for c in screen(name)["controls"])


def test_the_dialogs_button_is_clicked_never_the_one_behind(read: Any) -> None:
    name = "tuning-dialog-window-125-moved.png"
    (ours,) = [c for c in screen(name)["controls"]
               if c["text"] == "Enregistrer" and not c["behind"]]
    (behind,) = [c for c in screen(name)["controls"]
                 if c["text"] == "Enregistrer" and c["behind"]]
    x, y, w, h = behind["box"]
    # Recorded on the page before the dialog opened: its position and anchor are the
    # page's button, now behind the backdrop.
    spec = TargetSpec(by_text="Enregistrer", x_pct=(x + w / 2) / 1920, y_pct=(y + h / 2) / 1080,
                      anchor_image_base64=anchor(name, behind["box"]))
    found = resolve_point(spec, image(name), (0, 0), (0, 0, 1920, 1080), SCALES, 0.85,
                          TextSettings(read))
    assert found.found and inside(ours["box"], found.x, found.y), found


def test_a_label_read_only_behind_a_dialog_is_not_clicked(read: Any) -> None:
    name = "tuning-dialog-alone-100-recorded.png"
    found = resolve_point(TargetSpec(by_text="Laboratoire"), image(name), (0, 0),
                          (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
    assert not found.found and found.error == "target_not_found", found
    assert "behind a dialog" in (found.detail or ""), found


@pytest.mark.parametrize("rank", [0, 3, 6])
def test_the_row_says_which_identical_button(read: Any, rank: int) -> None:
    name = "tuning-labo-window-100-moved.png"
    rows = [c for c in screen(name)["controls"] if c["text"] == "Détail"]
    target = rows[rank]
    found = resolve_point(TargetSpec(by_text="Détail", near_text=target["row"]), image(name),
                          (0, 0), (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
    assert found.found and inside(target["box"], found.x, found.y), found
    alone = resolve_point(TargetSpec(by_text="Détail"), image(name), (0, 0),
                          (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
    assert alone.error == "ambiguous_target", alone


def test_a_row_text_not_on_screen_clicks_nothing(read: Any) -> None:
    name = "tuning-labo-window-100-moved.png"
    found = resolve_point(TargetSpec(by_text="Détail", near_text="Ferritine"), image(name),
                          (0, 0), (0, 0, 1920, 1080), SCALES, 0.85, TextSettings(read))
    assert not found.found and found.error == "target_not_found", found


def test_an_anchor_around_one_rows_button_does_not_choose_another_row(read: Any) -> None:
    """Each row's "Détail" looks like the others with 40x10 px around it: the anchor
    alone does not choose; with no position to tell them apart, no click."""
    name = "tuning-patients-alone-100-recorded.png"
    for c in [c for c in screen(name)["controls"] if c["text"] == "Détail"][:3]:
        spec = TargetSpec(by_text="Détail", anchor_image_base64=anchor(name, c["box"]))
        found = resolve_point(spec, image(name), (0, 0), (0, 0, 1920, 1080), SCALES, 0.85,
                              TextSettings(read))
        assert not found.found or inside(c["box"], found.x, found.y), found


def test_an_unsure_word_inside_a_sentence_cannot_be_a_copy() -> None:
    def word(text: str, left: int, conf: float = 0.95) -> Word:
        return Word(text, conf, (left, 0, 8 * len(text), 14), 0)

    sentence = [word("Le", 0), word("patient", 20, 0.5), word("a", 80), word("été", 92)]
    assert not could_be_label(sentence, 1, len("Modifier"), 0.8)
    alone = [word("Annuler", 0), word("fe)", 80, 0.4)]  # set apart like a button
    assert could_be_label(alone, 1, len("OK"), 0.8)
    assert could_be_label([word("Modifer", 0, 0.5)], 0, len("Modifier"), 0.8)
