"""The anchor image and the text on recorded screens of a real form rearranged since the
recording (agent/grounding/second_look.py, docs/grounding.md rule 6): an anchor that
matched a look-alike is set aside, a rival the anchor already set aside is not a twin
when read again, and an anchor's place that may hold the label still stops the click."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.second_look import anchor_look_alike, twin_seen_again
from agent.grounding.text import Candidate, Word
from messages.workflow import TargetSpec

DATA = Path(__file__).resolve().parent.parent / "data" / "grounding"
CONTEXT = (40, 10)
"""What a recorder keeps around the control in its anchor image (as bench/grounding.py)."""


def screen(name: str) -> dict[str, Any]:
    (found,) = [s for s in json.loads((DATA / "labels.json").read_text())["screens"]
                if s["image"] == name]
    return dict(found)


def boxes(name: str, text: str) -> list[list[int]]:
    return [list(c["box"]) for c in screen(name)["controls"] if c["text"] == text]


def recorded_spec(moved: str, text: str, rank: int = 0) -> TargetSpec:
    """The target as recorded on the same program's recorded layout: its text, its
    position there and an anchor cut there with a little around it."""
    recorded = moved.replace("-moved", "-recorded")
    x, y, w, h = boxes(recorded, text)[rank]
    shot = Image.open(DATA / recorded).convert("RGB")
    out = io.BytesIO()
    shot.crop((x - CONTEXT[0], y - CONTEXT[1], x + w + CONTEXT[0], y + h + CONTEXT[1])) \
        .save(out, "PNG")
    return TargetSpec(by_text=text, anchor_image_base64=base64.b64encode(out.getvalue()).decode(),
                      x_pct=(x + w / 2) / 1920, y_pct=(y + h / 2) / 1080)


def inside(box: list[int], x: int | None, y: int | None) -> bool:
    return x is not None and y is not None and box[0] <= x < box[0] + box[2] \
        and box[1] <= y < box[1] + box[3]


@pytest.mark.parametrize(("name", "text", "there"), [
    # The anchor matched two fields' captions alike at scale 0.8: not one place, so it
    # chooses nothing (before it was unique-only, it matched "Prénom", read surely there).
    ("fr-liberation-100-moved.png", "Enregistrer", "elsewhere: not one place"),
    # The anchor matched blank window edges alike: not one place either.
    ("en-dejavu-125-moved.png", "Save", "elsewhere: not one place"),
])
def test_an_anchor_on_a_look_alike_is_set_aside(read: Any, name: str, text: str,
                                                there: str) -> None:
    image = Image.open(DATA / name).convert("RGB")
    found = resolve_point(recorded_spec(name, text), image, (0, 0), (0, 0, 1920, 1080),
                          (1.0, 0.95, 1.05, 0.9, 1.1, 0.8, 1.25), 0.85, TextSettings(read))
    (box,) = boxes(name, text)
    assert found.found and inside(box, found.x, found.y), found
    assert there in (found.detail or ""), found


def test_a_rival_the_anchor_set_aside_is_not_a_twin_read_again(read: Any) -> None:
    """The form's second "OK" moved down a row; the first took its recorded place. The
    anchor chooses the second; read again at the recorded place, the first is no news."""
    name = "fr-dejavu-150-moved.png"
    image = Image.open(DATA / name).convert("RGB")
    found = resolve_point(recorded_spec(name, "OK", rank=1), image, (0, 0),
                          (0, 0, 1920, 1080), (1.0, 0.95, 1.05, 0.9, 1.1, 0.8, 1.25), 0.85,
                          TextSettings(read))
    assert found.found and inside(boxes(name, "OK")[1], found.x, found.y), found
    assert "the anchor chose" in (found.detail or ""), found


def ok(x: int, y: int, score: float = 1.0) -> Candidate:
    return Candidate("OK", score, 0.95, (x, y, 20, 12))


def test_a_twin_read_again_is_news_unless_the_anchor_weighed_it() -> None:
    chosen, rival, unseen = ok(400, 600), ok(400, 540), ok(700, 540)
    assert twin_seen_again(chosen, [rival], "OK", 0.8, weighed=[rival]) is None
    assert twin_seen_again(chosen, [rival], "OK", 0.8) is not None  # not weighed: stop
    stop = twin_seen_again(chosen, [rival, unseen], "OK", 0.8, weighed=[rival])
    assert stop is not None and stop.error == "ambiguous_target"


ANCHOR = (100, 100, 120, 40)  # its middle: (130, 110) to (190, 130)


@pytest.mark.parametrize(("words", "alike"), [
    ([Word("Prénom", 0.95, (135, 112, 50, 12), 0)], "Prénom"),
    ([Word("OK", 0.95, (150, 112, 20, 12), 0)], None),  # the label: a twin
    ([Word("0K", 0.96, (150, 112, 20, 12), 0)], None),  # like the label: may be it
    ([Word("fe)", 0.41, (150, 112, 20, 12), 0)], None),  # read unsurely: may be it
    ([Word("Nom", 0.95, (60, 112, 30, 12), 0)], None),  # nothing over the middle
    ([], None),  # nothing read: the label may be there unread
])
def test_what_an_anchors_place_must_read_to_be_a_look_alike(words: list[Word],
                                                            alike: str | None) -> None:
    assert anchor_look_alike(ANCHOR, words, "OK") == alike
