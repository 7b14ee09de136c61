"""Anchor template matching on synthetic screens (agent/grounding/anchor.py)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image, ImageDraw

from agent.grounding.anchor import DEFAULT_MIN_SCORE, AnchorError, decode_anchor, find_anchor

BUTTON = (700, 400, 800, 436)


def ui_screen(seed: int = 1) -> Image.Image:
    """A 1920x1080 screen of look-alike buttons (fill, outline, label) and one "Valider"."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (1920, 1080), (236, 239, 244))
    d = ImageDraw.Draw(img)
    for i in range(200):
        x, y = int(rng.integers(0, 1800)), int(rng.integers(0, 1040))
        if x + 140 > BUTTON[0] - 10 and x < BUTTON[2] + 10 and y + 50 > BUTTON[1] - 10 \
                and y < BUTTON[3] + 10:
            continue  # keep the real button uncovered
        colour = tuple(int(v) for v in rng.integers(0, 255, 3))
        d.rectangle((x, y, x + int(rng.integers(40, 140)), y + int(rng.integers(20, 50))),
                    fill=colour, outline=(0, 0, 0))
        d.text((x + 4, y + 4), f"btn{i}", fill=(0, 0, 0))
    d.rectangle(BUTTON, fill=(42, 111, 219), outline=(0, 0, 0), width=2)
    d.text((BUTTON[0] + 25, BUTTON[1] + 12), "Valider", fill=(255, 255, 255))
    return img


@pytest.fixture(scope="module")
def screen() -> Image.Image:
    return ui_screen()


def centre(box: tuple[int, int, int, int]) -> tuple[float, float]:
    return (box[0] + box[2] - 1) / 2, (box[1] + box[3] - 1) / 2


def test_exact_anchor_is_found_at_its_place(screen: Image.Image) -> None:
    m = find_anchor(screen, screen.crop(BUTTON))
    assert m.found and m.score == pytest.approx(1.0, abs=1e-3)
    assert (m.left, m.top, m.w, m.h) == (700, 400, 100, 36)
    assert (m.x, m.y) == centre(BUTTON)


@pytest.mark.parametrize("dx,dy", [(1, 0), (0, 1), (-1, -1), (1, 1)])
def test_anchor_cut_one_pixel_off_is_found_one_pixel_off(screen: Image.Image, dx: int,
                                                         dy: int) -> None:
    box = (BUTTON[0] + dx, BUTTON[1] + dy, BUTTON[2] + dx, BUTTON[3] + dy)
    m = find_anchor(screen, screen.crop(box))
    assert m.found and m.score > 0.99
    assert (m.left, m.top) == (box[0], box[1])


@pytest.mark.parametrize("factor", [0.93, 0.95, 1.05, 1.07, 1.25])
def test_slightly_rescaled_anchor_is_still_found(screen: Image.Image, factor: float) -> None:
    crop = screen.crop(BUTTON)
    anchor = crop.resize((round(crop.width * factor), round(crop.height * factor)),
                         Image.Resampling.BICUBIC)
    m = find_anchor(screen, anchor)
    cx, cy = centre(BUTTON)
    assert m.found, m
    assert abs(m.x - cx) <= 2 and abs(m.y - cy) <= 2, m


def test_rescaled_screen_is_matched_too() -> None:
    """The workstation runs at 125 % where the anchor was recorded at 100 %."""
    small = ui_screen(seed=3)
    big = small.resize((2400, 1350), Image.Resampling.BICUBIC)
    m = find_anchor(big, small.crop(BUTTON))
    assert m.found and abs(m.x - centre(BUTTON)[0] * 1.25) <= 3


@pytest.mark.parametrize("box", [BUTTON, (BUTTON[0] + 20, BUTTON[1] + 9, BUTTON[0] + 80,
                                         BUTTON[1] + 27)])
def test_anchor_is_found_on_a_screen_of_odd_size(screen: Image.Image,
                                                 box: tuple[int, int, int, int]) -> None:
    """1366x767 (sides with large prime factors: the FFTs are padded), the whole button
    (reduced by 3) and a part of it too small to reduce."""
    odd = screen.crop((0, 0, 1366, 767))
    m = find_anchor(odd, odd.crop(box))
    assert m.found and m.score > 0.99, m
    assert (m.left, m.top) == (box[0], box[1])


def test_absent_anchor_is_not_found(screen: Image.Image) -> None:
    absent = Image.new("RGB", (100, 36), (255, 255, 255))
    d = ImageDraw.Draw(absent)
    d.ellipse((4, 4, 30, 30), outline=(200, 0, 0), width=3)
    d.text((40, 10), "Annuler", fill=(0, 120, 0))
    # The same button with another label: the look-alike that must not be clicked.
    other = Image.new("RGB", (100, 36), (236, 239, 244))
    d = ImageDraw.Draw(other)
    d.rectangle((0, 0, 99, 35), fill=(42, 111, 219), outline=(0, 0, 0), width=2)
    d.text((25, 12), "Annuler", fill=(255, 255, 255))
    for anchor in (absent, other):
        m = find_anchor(screen, anchor)
        assert not m.found and m.score < DEFAULT_MIN_SCORE, m


def test_anchor_larger_than_the_screen_is_not_found(screen: Image.Image) -> None:
    m = find_anchor(screen.crop((0, 0, 200, 100)), screen.crop((0, 0, 300, 150)))
    assert not m.found


@pytest.mark.parametrize("anchor", [Image.new("RGB", (40, 20), (9, 9, 9)),
                                    Image.new("RGB", (1, 30), (9, 9, 9))])
def test_flat_or_tiny_anchor_is_an_error(screen: Image.Image, anchor: Image.Image) -> None:
    with pytest.raises(AnchorError):
        find_anchor(screen, anchor)


def test_decode_anchor_accepts_data_urls_and_refuses_garbage(screen: Image.Image) -> None:
    out = io.BytesIO()
    screen.crop(BUTTON).save(out, "PNG")
    b64 = base64.b64encode(out.getvalue()).decode()
    assert decode_anchor(b64).size == (100, 36)
    assert decode_anchor("data:image/png;base64," + b64).size == (100, 36)
    for bad in ("not base64 !", base64.b64encode(b"not an image").decode()):
        with pytest.raises(AnchorError):
            decode_anchor(bad)
