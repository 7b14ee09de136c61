"""Anchor matching on real screens (tests/data/grounding: Tk form and mousepad under Xvfb).

Each anchor is the control and 40 x 10 px around it, cut from the ``recorded`` layout (as
``bench.grounding`` cuts it) and searched on a screen of the set. The expected matches are
those of the matcher before it was made faster (``python bench/anchor_match.py --compare``
checks the whole set): a faster matcher must find the same place, at the same scale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from agent.grounding.anchor import find_anchor

DATA = Path(__file__).resolve().parent.parent / "data" / "grounding"

# (searched screen, recorded screen, anchor cut (left, top, right, bottom)),
# (found, left, top, w, h, scale, score)
CASES = [
    # The control where it was recorded, and moved: the first scale (1.0) matches.
    (("en-dejavu-100-moved.png", "en-dejavu-100-recorded.png", (136, 363, 315, 406)),
     (True, 136, 418, 179, 43, 1.0, 1.0)),
    (("en-liberation-125-recorded.png", "en-liberation-125-recorded.png", (142, 384, 333, 430)),
     (True, 142, 384, 191, 46, 1.0, 1.0)),
    (("mousepad-fr-liberation-100-moved.png", "mousepad-fr-liberation-100-recorded.png",
      (437, 74, 587, 118)),
     (True, 1125, 245, 150, 44, 1.0, 1.0)),
    # Moved buttons whose surroundings changed: nothing scores 0.95, every scale is tried.
    # Each matches look-alikes (a bare edge, a blank field) at several places about as
    # well: since every coarse peak about as good as the best is refined, the best of them
    # is found and the match is ambiguous (``AMBIGUOUS`` below).
    (("en-dejavu-100-moved.png", "en-dejavu-100-recorded.png", (136, 512, 276, 563)),
     (True, 137, 88, 133, 48, 0.95, 0.9548)),
    (("en-liberation-100-moved.png", "en-liberation-100-recorded.png", (1208, 497, 1357, 547)),
     (True, 1221, 85, 134, 45, 0.9, 0.9501)),
    (("en-liberation-100-moved.png", "en-liberation-100-recorded.png", (876, 497, 1014, 547)),
     (True, 877, 84, 131, 48, 0.95, 0.9582)),
    (("en-dejavu-100-moved.png", "en-dejavu-100-recorded.png", (481, 512, 633, 563)),
     (True, 1479, 832, 122, 41, 0.8, 0.9497)),
    # ... and below the minimum score: not found.
    (("en-dejavu-150-moved.png", "en-dejavu-150-recorded.png", (642, 634, 830, 696)),
     (False, 1622, 784, 150, 50, 0.8, 0.8467)),
    (("fr-liberation-150-moved.png", "fr-liberation-150-recorded.png", (702, 627, 920, 689)),
     (False, 25, 751, 174, 50, 0.8, 0.7555)),
]
AMBIGUOUS = {3, 4, 5, 6}
"""The cases whose match is not unique (another place within ``UNIQUE_MARGIN``)."""


def screen(name: str) -> Image.Image:
    return Image.open(DATA / name).convert("RGB")


def ncc(shot: Image.Image, anchor: Image.Image, left: int, top: int, w: int, h: int) -> float:
    """The zero-mean normalised cross-correlation of the anchor, resized to ``w x h``, with
    the screen at ``(left, top)``: summed directly, nothing shared with the matcher."""
    grey = anchor.convert("L")
    if grey.size != (w, h):
        grey = grey.resize((w, h), Image.Resampling.BILINEAR)
    t = np.asarray(grey, dtype=np.float64)
    a = np.asarray(shot.convert("L"), dtype=np.float64)[top:top + h, left:left + w]
    t, a = t - t.mean(), a - a.mean()
    return float((t * a).sum() / np.sqrt((t * t).sum() * (a * a).sum()))


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0][0] for c in CASES])
def test_anchor_on_a_real_screen_is_found_where_it_was(case: int) -> None:
    (name, recorded, cut), expected = CASES[case]
    shot, anchor = screen(name), screen(recorded).crop(cut)
    m = find_anchor(shot, anchor)
    assert m.ambiguous == (case in AMBIGUOUS), m
    assert (m.found, m.left, m.top, m.w, m.h, m.scale) == expected[:6], m
    assert m.score == pytest.approx(expected[6], abs=1e-3)
    assert m.score == pytest.approx(ncc(shot, anchor, m.left, m.top, m.w, m.h), abs=1e-4)


def test_equal_places_tie_and_either_is_the_match() -> None:
    """Two places of exactly the same pixels score exactly the same: the match is one of
    them (the first refined), at the score both have."""
    shot = screen("fr-liberation-125-moved.png")
    m = find_anchor(shot, screen("fr-liberation-125-recorded.png").crop((1440, 547, 1611, 603)))
    assert (m.found, m.w, m.h, m.scale) == (True, 137, 45, 0.8), m
    assert m.score == pytest.approx(0.9358, abs=1e-3)
    assert m.ambiguous and m.second == pytest.approx(m.score, abs=1e-3), m
    grey = np.asarray(shot.convert("L"))
    twins = (85, 543)  # the two tops of equal pixels: whichever is refined, a tie
    assert np.array_equal(*(grey[t:t + m.h, 1470:1470 + m.w] for t in twins))
