"""Find an anchor image (a crop recorded with the workflow) on a monitor's pixels.

Zero-mean normalised cross-correlation (the score OpenCV calls TM_CCOEFF_NORMED: 1.0 is a
perfect match, insensitive to brightness and contrast changes), coarse to fine:

1. coarse: the monitor image and the anchor, both reduced by the same factor (box average,
   then a one-pixel blur so that where the box grid falls does not matter), are correlated
   through the FFT at every position, for each of a few anchor scales (a recorded anchor
   may come back slightly larger or smaller: another DPI, a zoomed app), the most likely
   scale first; a near-perfect match ends the search;
2. fine: around the best few coarse peaks, the full-resolution anchor at that scale is
   correlated over a small window (through the FFT too, its sums of products rounded to
   the integers they are), which recovers the exact position (a 1-pixel shift included)
   and the true score.

A match below ``min_score`` is no match: the caller reports ``target_not_found`` and does
not click. A match is trusted only where it is unique: ``Match.second`` is the best score
at another place (the coarse peaks refined at full resolution), and a place within
``UNIQUE_MARGIN`` of the best one makes the match ``ambiguous`` (a table's rows look alike
around their identical buttons, docs/grounding.md). Among places that read alike,
:func:`score_near` compares the anchor at each with both blurred by ``ALIKE_BLUR``: the
same text drawn at another sub-pixel phase (rows at a fractional pitch) differs in its
anti-aliasing alone, which the correlation of thin strokes takes for other content. Pure
numpy + Pillow: no screen, testable on synthetic images.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageFilter, UnidentifiedImageError

F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
C128 = npt.NDArray[np.complex128]

DEFAULT_SCALES: tuple[float, ...] = (1.0, 0.95, 1.05, 0.9, 1.1, 0.8, 1.25)
"""Anchor scales tried: slight rescales, and 100 % <-> 125 % display scaling."""
DEFAULT_MIN_SCORE = 0.85
MIN_COARSE_SIDE = 8
"""The reduced anchor keeps at least this many pixels on its shorter side."""
MAX_COARSE_FACTOR = 3
COARSE_BLUR = 1
PEAKS_PER_SCALE = 3
"""Coarse peaks refined at full resolution per scale (the true one is not always the best
at coarse resolution, where similar-looking buttons differ only by their text)."""
EARLY_ACCEPT = 0.95
"""A match this good ends the search: no other scale can do meaningfully better."""
SCALE_STEP = 0.025
"""Scales tried around the best one, at full resolution only."""
FLAT_STD = 2.0
"""A grey-level standard deviation below this means the anchor has nothing to match on."""
MAX_ANCHOR_PIXELS = 4_000_000
UNIQUE_MARGIN = 0.1
"""A second place scoring within this of the best makes the match ambiguous."""
ALIKE_BLUR = 1.5
"""Radius (screen pixels) of the Gaussian blur under which a match's uniqueness is judged:
the same pixels shifted by a fraction of a pixel then score nearly the same."""
MAX_PEAKS = 24
"""At most this many coarse peaks refined per scale: the first ``PEAKS_PER_SCALE``, and
those after them scoring within ``UNIQUE_MARGIN`` of the best (a table's rows)."""


class AnchorError(ValueError):
    """The anchor image cannot be used (not an image, empty, flat, too large)."""


@dataclass(frozen=True, slots=True)
class Match:
    """Where the anchor was found, in the searched image's pixels (``x, y`` = its centre)."""

    found: bool
    x: float
    y: float
    score: float
    scale: float
    left: int
    top: int
    w: int
    h: int
    elapsed_ms: float
    second: float = -1.0
    """The best score at another place (at least half the anchor away), -1: none."""

    @property
    def ambiguous(self) -> bool:
        """Another place scores within ``UNIQUE_MARGIN`` of this one: the anchor alone
        cannot say which."""
        return self.found and self.second >= self.score - UNIQUE_MARGIN


def decode_anchor(data: str) -> Image.Image:
    """The anchor from base64 (a ``data:image/...;base64,`` prefix is accepted)."""
    text = data.strip()
    if text.startswith("data:"):
        text = text.partition(",")[2]
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AnchorError(f"anchor_image_base64 is not base64: {exc}") from exc
    try:
        with Image.open(io.BytesIO(raw)) as img:
            if img.width * img.height > MAX_ANCHOR_PIXELS:
                raise AnchorError(f"anchor image too large ({img.width}x{img.height})")
            img.load()
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise AnchorError(f"anchor_image_base64 is not an image: {exc}") from exc


def gray(image: Image.Image) -> F64:
    """Luma in [0, 255] as float64 (the correlation sums need the precision)."""
    return np.asarray(image.convert("L"), dtype=np.float64)


def _coarse(image: Image.Image, factor: int, template: bool = False) -> Image.Image:
    """Reduced by ``factor`` (box average), then blurred by one coarse pixel.

    The blur makes the coarse picture nearly independent of where the box grid falls (a
    1-pixel line lands in one coarse pixel or is split over two): an anchor cut at any offset
    still correlates well. A template's blurred border saw no neighbours, so it is cut off
    (``template=True``): its coarse position is then one coarse pixel further in.
    """
    if factor == 1:
        return image
    blurred = image.reduce(factor).filter(ImageFilter.BoxBlur(COARSE_BLUR))
    if not template:
        return blurred
    b = COARSE_BLUR
    return blurred.crop((b, b, blurred.width - b, blurred.height - b))


def _resize(image: Image.Image, w: int, h: int) -> Image.Image:
    if (w, h) == image.size:
        return image
    return image.resize((max(1, w), max(1, h)), Image.Resampling.BILINEAR)


def _fast_len(n: int) -> int:
    """The smallest length >= ``n`` with no prime factor above 5 (where the FFT is fast)."""
    while True:
        m = n
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def _integrals(a: U8) -> tuple[F64, F64]:
    """Integral images of ``a`` and ``a * a``, padded with a zero row and column.

    Summed in int64 (a few times faster than float64 sums), then held as float64 (window
    sums a few times faster): exact either way, these integers are far below 2**53."""
    out = np.zeros((2, a.shape[0] + 1, a.shape[1] + 1), dtype=np.int64)
    inner = out[:, 1:, 1:]
    inner[0] = a
    np.multiply(inner[0], inner[0], out=inner[1])
    np.cumsum(inner, axis=1, out=inner)
    np.cumsum(inner, axis=2, out=inner)
    both = out.astype(np.float64)
    return both[0], both[1]


def _window_sums(integral: F64, h: int, w: int) -> F64:
    """Sum of every ``h x w`` window, from an integral image padded with a zero row/column."""
    out = integral[h:, w:] - integral[:-h, w:]
    out -= integral[h:, :-w]
    out += integral[:-h, :-w]
    return out


class _Coarse:
    """The reduced monitor image, prepared once for every anchor scale (FFT + sums)."""

    def __init__(self, a: U8) -> None:
        self.shape = a.shape
        self.fft_shape = (_fast_len(a.shape[0]), _fast_len(a.shape[1]))
        self.s1, self.s2 = _integrals(a)
        self.spectrum = np.fft.rfft2(a, s=self.fft_shape)

    def ncc_all(self, t: F64) -> F64:
        """The score at every position where ``t`` fits (FFT correlation)."""
        h, w = t.shape
        tz = t - t.mean()
        rows, cols = self.shape[0] - h + 1, self.shape[1] - w + 1
        # rfft2 and irfft2 axis by axis, the same transforms: the template's padding rows
        # and the correlation's rows never read are not transformed along the rows.
        spec = np.fft.fft(np.fft.rfft(tz, n=self.fft_shape[1], axis=1), n=self.fft_shape[0],
                          axis=0)
        np.conjugate(spec, out=spec)
        spec *= self.spectrum
        corr = np.fft.irfft(np.fft.ifft(spec, axis=0)[:rows], n=self.fft_shape[1], axis=1)
        return _divide(corr[:, :cols], _denominator(
            _window_sums(self.s1, h, w), _window_sums(self.s2, h, w), h * w, _norm(tz)))


def _norm(tz: F64) -> float:
    return float(np.sqrt((tz * tz).sum()))


def _denominator(w1: F64, w2: F64, n: int, norm: float) -> F64:
    """From the window sums of ``n`` pixels and of their squares (both overwritten) and the
    norm of the zero-mean anchor."""
    np.multiply(w1, w1, out=w1)
    w1 /= n
    np.subtract(w2, w1, out=w2)
    np.maximum(w2, 0.0, out=w2)
    np.sqrt(w2, out=w2)
    w2 *= norm
    return w2


class _Scaled:
    """The anchor at one scale, full resolution, with its spectra by FFT size."""

    def __init__(self, anchor: Image.Image, scale: float, blur: float = 0.0) -> None:
        self.scale = scale
        self.w, self.h = round(anchor.width * scale), round(anchor.height * scale)
        self.t = gray(_blurred(_resize(anchor, self.w, self.h), blur))
        self.mean = float(self.t.mean())
        self.norm = _norm(self.t - self.mean)
        self._spectra: dict[tuple[int, int], C128] = {}

    def spectrum(self, shape: tuple[int, int]) -> C128:
        """The conjugate spectrum of the anchor, zero-padded to ``shape``."""
        if shape not in self._spectra:
            self._spectra[shape] = np.conjugate(np.fft.rfft2(self.t, s=shape))
        return self._spectra[shape]


def ncc_window(a: U8, t: _Scaled, top: int, left: int, rows: int, cols: int) -> F64:
    """The score of ``t`` at positions ``[top, top+rows) x [left, left+cols)`` of ``a``
    (correlated over that window only, through the FFT)."""
    h, w = t.h, t.w
    sub = a[top:top + rows + h - 1, left:left + cols + w - 1]
    shape = (_fast_len(sub.shape[0]), _fast_len(sub.shape[1]))
    spec = np.fft.rfft2(sub, s=shape)
    spec *= t.spectrum(shape)
    # Sums of products of 8-bit pixels: integers, exact once rounded (far below 2**53, the
    # FFT's error far below 0.5), so that equal pixels score exactly the same wherever
    # they are and a tie goes to the first place, not to rounding noise.
    dot = np.rint(np.fft.irfft2(spec, s=shape)[:rows, :cols])
    s1, s2 = _integrals(sub)
    w1 = _window_sums(s1, h, w)
    num = dot - t.mean * w1
    return _divide(num, _denominator(w1, _window_sums(s2, h, w), h * w, t.norm))


def _divide(num: F64, den: F64) -> F64:
    """``num / den`` in ``den``'s place, within [-1, 1]."""
    # A flat screen region (den ~ 0) matches nothing rather than everything.
    ok = den > 1e-6
    np.divide(num, den, out=den, where=ok)
    den[~ok] = 0.0
    np.clip(den, -1.0, 1.0, out=den)
    return den


def _peaks(scores: F64, count: int, radius: int) -> list[tuple[float, int, int]]:
    """The ``count`` best positions at least ``radius`` apart (greedy suppression; the
    suppressed ``scores`` are overwritten)."""
    found: list[tuple[float, int, int]] = []
    work = scores
    for _ in range(count):
        flat = int(np.argmax(work))
        r, c = divmod(flat, work.shape[1])
        best = float(work[r, c])
        if best <= -1.0:
            break
        found.append((best, r, c))
        work[max(0, r - radius):r + radius + 1, max(0, c - radius):c + radius + 1] = -1.0
    return found


def find_anchor(screen: Image.Image, anchor: Image.Image,
                scales: Sequence[float] = DEFAULT_SCALES,
                min_score: float = DEFAULT_MIN_SCORE) -> Match:
    """Best match of ``anchor`` in ``screen`` (both PIL images, any mode).

    Scales are tried in the order given and the search stops at the first one whose match
    scores ``EARLY_ACCEPT``: on the machine that recorded the anchor, the first (1.0) is
    the usual answer. Raises :class:`AnchorError` if the anchor cannot be matched at all.
    """
    started = time.perf_counter()
    anchor_l, screen_l = anchor.convert("L"), screen.convert("L")
    aw, ah = anchor_l.size
    if aw < 2 or ah < 2:
        raise AnchorError(f"anchor image too small ({aw}x{ah})")
    if float(gray(anchor_l).std()) < FLAT_STD:
        raise AnchorError("anchor image is flat (one colour): nothing to match on")
    factor = max(1, min(MAX_COARSE_FACTOR, min(aw, ah) // (MIN_COARSE_SIDE + 2 * COARSE_BLUR)))
    shift = COARSE_BLUR if factor > 1 else 0
    coarse = _Coarse(np.asarray(_coarse(screen_l, factor)))
    full = np.asarray(screen_l)
    best: _Fine | None = None
    fines: list[_Fine] = []
    for s in scales:
        w, h = round(aw * s), round(ah * s)
        if s <= 0 or w < 2 or h < 2 or w > screen_l.width or h > screen_l.height:
            continue
        t = gray(_coarse(_resize(anchor_l, w, h), factor, template=True))
        th, tw = t.shape
        if min(tw, th) < 2 or tw > coarse.shape[1] or th > coarse.shape[0] \
                or float(t.std()) < FLAT_STD / 2:
            continue
        scaled = _Scaled(anchor_l, s)
        peaks = _peaks(coarse.ncc_all(t), MAX_PEAKS, max(1, min(tw, th) // 2))
        # Past the first few, every peak about as good as the best is refined too: among
        # many rows alike the true one may be none of the first at coarse resolution, and
        # a twin left unrefined would make the match look unique at the wrong row.
        peaks = [p for i, p in enumerate(peaks)
                 if i < PEAKS_PER_SCALE or p[0] >= peaks[0][0] - UNIQUE_MARGIN]
        for _score, r, c in peaks:
            fine = _refine(full, scaled, (r - shift) * factor, (c - shift) * factor,
                           factor + 2)
            if fine is not None:
                fines.append(fine)
            if fine is not None and (best is None or fine.score > best.score):
                best = fine
        if best is not None and best.score >= EARLY_ACCEPT:
            break
    if best is not None and best.score < EARLY_ACCEPT:
        # The scale grid is coarse: try the neighbours of the best scale at the best spot.
        for s in (best.scale - SCALE_STEP, best.scale + SCALE_STEP):
            fine = _refine(full, _Scaled(anchor_l, s), best.top, best.left, 2)
            if fine is not None and fine.score > best.score:
                best = fine
    elapsed = round((time.perf_counter() - started) * 1000, 3)
    if best is None:
        return Match(False, 0.0, 0.0, 0.0, 1.0, 0, 0, aw, ah, elapsed)
    others = [f.score for f in fines if abs(f.left - best.left) >= best.w / 2
              or abs(f.top - best.top) >= best.h / 2]
    return Match(best.score >= min_score, best.left + (best.w - 1) / 2,
                 best.top + (best.h - 1) / 2, round(best.score, 4), round(best.scale, 4),
                 best.left, best.top, best.w, best.h, elapsed,
                 round(max(others, default=-1.0), 4))


def _blurred(image: Image.Image, radius: float) -> Image.Image:
    return image.filter(ImageFilter.GaussianBlur(radius)) if radius > 0 else image


@dataclass(frozen=True, slots=True)
class _Fine:
    score: float
    scale: float
    top: int
    left: int
    w: int
    h: int


def _refine(full: U8, t: _Scaled, row: int, col: int, margin: int) -> _Fine | None:
    """The best full-resolution position within ``margin`` pixels of ``(row, col)``."""
    w, h = t.w, t.h
    if w < 2 or h < 2 or w > full.shape[1] or h > full.shape[0]:
        return None
    top, left = max(0, row - margin), max(0, col - margin)
    rows = min(full.shape[0] - h + 1, row + margin + 1) - top
    cols = min(full.shape[1] - w + 1, col + margin + 1) - left
    if rows <= 0 or cols <= 0:
        return None
    scores = ncc_window(full, t, top, left, rows, cols)
    dr, dc = divmod(int(np.argmax(scores)), scores.shape[1])
    return _Fine(float(scores[dr, dc]), t.scale, top + dr, left + dc, w, h)


NEAR_SEARCH = 3
"""Pixels around an expected place that :func:`score_near` searches."""


def blurred_score(screen_l: Image.Image, t: _Scaled, left: int, top: int) -> float:
    """The best score of ``t`` (blurred by ``ALIKE_BLUR``) within ``NEAR_SEARCH`` pixels
    of ``(left, top)`` on the grey ``screen_l`` blurred alike (only the part around that
    place is blurred, with room for the blur's reach)."""
    pad = NEAR_SEARCH + 3 * math.ceil(ALIKE_BLUR)
    box = (max(0, left - pad), max(0, top - pad), min(screen_l.width, left + t.w + pad),
           min(screen_l.height, top + t.h + pad))
    part = np.asarray(_blurred(screen_l.crop(box), ALIKE_BLUR))
    fine = _refine(part, t, top - box[1], left - box[0], NEAR_SEARCH)
    return -1.0 if fine is None else fine.score


def score_near(screen: Image.Image, anchor: Image.Image, scale: float, left: int,
               top: int) -> float:
    """The anchor's best score at ``scale`` within ``NEAR_SEARCH`` pixels of ``(left,
    top)`` (its top-left corner), both blurred by ``ALIKE_BLUR``: how well it matches one
    given place, to compare that place with the one it matched (a twin of the row it was
    cut on) as :attr:`Match.ambiguous` compares them."""
    t = _Scaled(anchor.convert("L"), scale, ALIKE_BLUR)
    return blurred_score(screen.convert("L"), t, left, top)
