"""An anchor among rows alike (agent/grounding/anchor.py ``score_near``, docs/grounding.md rule 15):
among places read alike, the anchor chooses only where it matches clearly better than at
every other, compared blurred (``ALIKE_BLUR``), for the same link drawn at another
sub-pixel phase scores far lower than itself, sharp, and looked unique."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.anchor import UNIQUE_MARGIN, score_near
from messages.workflow import TargetSpec
from tests.unit.test_grounding_web import inside, screen

DATA = Path(__file__).resolve().parent.parent / "data" / "grounding_web"
SCALES = (1.0, 0.95, 1.05, 0.9, 1.1, 0.8, 1.25)


def _png(image: Image.Image) -> str:
    out = io.BytesIO()
    image.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def _links(lines: list[tuple[str, int, int]]) -> Image.Image:
    """Underlined links drawn three times larger, then reduced: ``(text, left, top)`` in
    thirds of a pixel, so that a line can stand at a fraction of a pixel."""
    big = Image.new("L", (600, 450), 255)
    d = ImageDraw.Draw(big)
    for text, left, top in lines:
        d.text((left, top), text, fill=110, font_size=36)
        d.line((left, top + 39, left + 330, top + 39), fill=110, width=3)
    return big.resize((200, 150), Image.Resampling.BOX).convert("RGB")


def test_the_same_link_at_another_sub_pixel_phase_scores_alike() -> None:
    """Drawn twins: the same links twice, the second a third of a pixel right and two
    thirds lower (rows at a fractional pitch). Sharp, the correlation of thin strokes
    scored it 0.83 against 1.00 for itself: "unique" by the margin. Compared blurred, they
    are alike; a row without the link beside it is still not."""
    shot = _links([("Répondre  Archiver", 60, 30), ("Répondre  Archiver", 61, 152),
                   ("Répondre", 60, 330)])
    anchor = shot.crop((10, 0, 130, 34))
    here = score_near(shot, anchor, 1.0, 10, 0)
    assert here == pytest.approx(1.0, abs=0.01)
    assert score_near(shot, anchor, 1.0, 10, 40) >= here - UNIQUE_MARGIN
    assert score_near(shot, anchor, 1.0, 10, 100) < here - UNIQUE_MARGIN


def test_an_anchor_cut_on_one_message_never_clicks_another_messages_link(read: Any) -> None:
    """The inbox recorded, then moved (other messages, another order): the anchor cut
    around one message's link (the link and 40 x 10 px around it: the one beside it, a
    sliver of the line above) matched another message's link "uniquely" (1.00 against 0.70
    elsewhere, sharp) and that link was clicked. Now: the link of that same message, or no
    click (``ambiguous_target``)."""
    recorded = "tuning-inbox-alone-100-recorded.png"
    moved = "tuning-inbox-alone-100-moved.png"
    shot = Image.open(DATA / recorded).convert("RGB")
    now = Image.open(DATA / moved).convert("RGB")
    by_author = {(c["text"], c["row"]): c["box"] for c in screen(moved)["controls"]}
    for c in screen(recorded)["controls"]:
        if c["text"] not in ("Répondre", "Archiver"):
            continue
        x, y, w, h = c["box"]
        spec = TargetSpec(by_text=c["text"], x_pct=(x + w / 2) / 1920,
                          y_pct=(y + h / 2) / 1080,
                          anchor_image_base64=_png(shot.crop((x - 40, y - 10, x + w + 40,
                                                              y + h + 10))))
        found = resolve_point(spec, now, (0, 0), (0, 0, 1920, 1080), SCALES, 0.85,
                              TextSettings(read))
        if found.found:
            box = by_author.get((c["text"], c["row"]))
            assert box is not None and inside(box, found.x, found.y), (c, found)
