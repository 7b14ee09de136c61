"""The whole monitor read as strips kept by their pixels (agent/grounding/strips.py and
TesseractReader): which rows a strip reads and owns, and that a kept reading is exactly
the reading of the same pixels, so a changed screen never gets an old one."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.strips import KeptStrips, Strip, join, strip_keys, strips
from agent.grounding.text import Word, normalise
from messages.workflow import TargetSpec

WEB = Path(__file__).resolve().parent.parent / "data" / "grounding_web"
ANNULER = (393, 381, 74, 28)
"""The form's "Annuler" button on tuning-form-alone-100-recorded.png (labels.json)."""


def test_two_strips_are_the_halves_and_every_row_is_owned_once() -> None:
    assert strips(1080, 2, 48) == [Strip(0, 588, 0, 540), Strip(492, 1080, 540, 1080)]
    for height, count in [(1080, 4), (1080, 6), (1081, 7), (1440, 8), (300, 8)]:
        parts = strips(height, count, 48)
        assert [p.own_from for p in parts[1:]] == [p.own_to for p in parts[:-1]]
        assert parts[0].own_from == parts[0].top == 0
        assert parts[-1].own_to == parts[-1].bottom == height
        for p in parts:  # a line up to the seam high, owned here, is whole in the crop
            assert p.top <= max(0, p.own_from - 48) and p.bottom >= min(height, p.own_to + 48)
            assert p.own_to - p.own_from >= 2 * 48
    assert strips(300, 8, 48) == strips(300, 3, 48)  # never lower than two seams
    assert strips(150, 4, 48) == [Strip(0, 150, 0, 150)]


def test_a_strip_is_keyed_on_every_pixel_of_its_crop_and_on_nothing_else() -> None:
    grey = Image.new("L", (200, 400), 240)
    parts = strips(400, 4, 48)  # rows 0-100-200-300-400, crops 48 rows wider
    before = strip_keys(grey, parts)
    assert strip_keys(grey.copy(), parts) == before  # the same pixels, the same keys
    changed = grey.copy()
    changed.putpixel((150, 230), 239)  # owned by the third strip, in the second's seam
    after = strip_keys(changed, parts)
    assert [a == b for a, b in zip(before, after, strict=True)] == [True, False, False, True]
    with pytest.raises(ValueError, match="grey"):
        strip_keys(grey.convert("RGB"), parts)


def test_strips_joined_number_their_lines_in_one_sequence() -> None:
    a = [Word("Nom", 0.9, (0, 0, 30, 12), 0), Word("Prénom", 0.9, (0, 30, 50, 12), 2)]
    b = [Word("Service", 0.9, (0, 300, 60, 12), 1)]
    assert [w.line for w in join([a, [], b])] == [0, 2, 4]


def test_kept_strips_forget_the_oldest() -> None:
    kept = KeptStrips(2)
    keys = [(Strip(0, 10, 0, 10), 10, bytes([i])) for i in range(3)]
    for i, key in enumerate(keys):
        kept.remember(key, [Word(str(i), 1.0, (0, 0, 1, 1), 0)])
    assert kept.recall(keys[0]) is None and kept.recall(keys[2]) is not None
    assert KeptStrips(0).recall(keys[0]) is None


def _form() -> tuple[Image.Image, Image.Image]:
    """The form, and the same form with a copy of its "Annuler" button pasted lower down
    (rows 700-728): a second "Annuler", in another strip."""
    screen = Image.open(WEB / "tuning-form-alone-100-recorded.png").convert("RGB")
    x, y, w, h = ANNULER
    button = screen.crop((x - 4, y - 4, x + w + 4, y + h + 4))
    twice = screen.copy()
    twice.paste(button, (x - 4, 700 - 4))
    return screen, twice


@pytest.mark.parametrize("count", [2, 4])
def test_a_changed_screen_never_gets_the_old_reading(count: int) -> None:
    """Read once with one "Annuler" (clicked), the screen then shows a second one: the
    reader keeping strips reads the strip that changed, and refuses as a fresh reader
    does (``ambiguous_target``); its words are a fresh reading's, to the pixel."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    once, twice = _form()
    kept, fresh = TesseractReader(workers=2, strips=count), \
        TesseractReader(workers=2, strips=count, keep=0)
    spec = TargetSpec(by_text="Annuler")
    try:
        first = resolve_point(spec, once, (0, 0), (0, 0, 1920, 1080), (1.0,), 0.85,
                              TextSettings(kept.read, read_many=kept.read_many))
        assert first.found, first
        before = kept.strips_read
        again = resolve_point(spec, twice, (0, 0), (0, 0, 1920, 1080), (1.0,), 0.85,
                              TextSettings(kept.read, read_many=kept.read_many))
        read_again = kept.strips_read - before
        anew = resolve_point(spec, twice, (0, 0), (0, 0, 1920, 1080), (1.0,), 0.85,
                             TextSettings(fresh.read, read_many=fresh.read_many))
        words, fresh_words = kept.read(twice), fresh.read(twice)
    finally:
        kept.close()
        fresh.close()
    assert not anew.found and anew.error == "ambiguous_target", anew
    assert not again.found and again.error == "ambiguous_target", again
    assert words == fresh_words
    assert [normalise(w.text) for w in words].count("annuler") == 2
    assert read_again == 1  # the strip holding rows 700-728 only


def test_a_change_in_a_seam_reads_both_strips_that_hold_it() -> None:
    """Rows 545-573 are the third of four strips' own and in the second's crop too: both
    are read again, and the words are a fresh reading's."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    once, _ = _form()
    x, y, w, h = ANNULER
    seam = once.copy()
    seam.paste(once.crop((x - 4, y - 4, x + w + 4, y + h + 4)), (x - 4, 545 - 4))
    kept, fresh = TesseractReader(workers=2, strips=4), \
        TesseractReader(workers=2, strips=4, keep=0)
    try:
        kept.read(once)
        before = kept.strips_read
        words = kept.read(seam)
        read_again = kept.strips_read - before
        assert words == fresh.read(seam) and read_again == 2
        assert kept.read(seam) == words and kept.strips_read - before == 2  # kept whole
    finally:
        kept.close()
        fresh.close()
