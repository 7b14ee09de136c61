"""Find a label among the words an OCR engine read, and decide whether to act on it.

Pure: words in, a decision out (docs/grounding.md explains the rules and their figures).

1. Words are compared as *normalised* text: case folded, accents removed (é -> e,
   œ -> oe), punctuation and spaces dropped, so "ENREGISTRER…", "Enregistrer" and
   "enregistrer" are the same text and an OCR that splits or merges words still matches.
2. Words are grouped into *phrases*: the words of one OCR line, cut where the gap between
   two words is wider than a space can be (two buttons side by side are two phrases).
3. Each phrase gives at most one candidate: its span of words most similar to the label.
   The score is the similarity (0..1, by edit distance) times the part of the phrase that
   span covers, so "Enregistrer" inside "Enregistrer sous" scores about 0.7, not 1: a
   label is matched as a whole control's text, never as a piece of another's.
4. The best candidate at or above ``min_score`` is acted on only if no rival comes close
   (within ``margin`` of it). Rivals are told apart by the anchor image (the candidate
   under the anchor's match) or else by the recorded position, but only if one of them
   is still at it (within ``NEAR`` text heights) and every other is far from it
   (``TWIN_GAP`` text heights): once a form is rearranged, the twin now nearest the
   recorded place may be the other one. An anchor that matches elsewhere than the chosen
   text is a disagreement, not a tie-break (``Decision.anchor_elsewhere``: the caller
   looks at that place, agent/grounding/second_look.py). Nothing breaks the tie:
   ``ambiguous_target``; nothing good enough: ``target_not_found``. Either way the caller
   does not act, and the reason lists what was seen.
"""

from __future__ import annotations

import functools
import itertools
import math
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rapidfuzz.distance import Levenshtein

Box = tuple[int, int, int, int]
"""``(left, top, width, height)`` in the searched image's pixels."""

DEFAULT_MIN_SCORE = 0.8
DEFAULT_MARGIN = 0.15
"""A rival within this of the best score makes the best one uncertain."""
NEAR = 2.0
TWIN_GAP = 8.0
"""A recorded position breaks a tie if one candidate is within ``NEAR`` text heights of it
and every other beyond ``TWIN_GAP``."""
PHRASE_GAP = 1.2
"""Two words of one line farther apart than this many text heights are two phrases. A
space is under half a text height, two controls' texts are twice as far apart or more
on the set; a word's box read a letter short (seen: "Known" 8 px short of its "n")
widened a space to 1.1 text heights."""
ITEM_GAP = 0.85
"""Items of a row (a menu bar's titles) are at least this many text heights apart on the
set (0.89-1.2 for GTK's), a space inside a label at most 0.78 (:func:`item_by_place`)."""
WRAPPED_LABEL = 3
"""A label of this many words or more is also matched on lines stacked (:func:`stacks`)."""
WRAP_GAP = 1.2
"""Two lines of one wrapped label are at most this many text heights apart (the taller
line's: a line misread is boxed short, "Valider et" 11 px high over a 16 px line, 17 px
above it, on a narrow button at 150 %)."""
LONG_LABEL = 4
SENTENCE_GAP = 4.0
"""A label of ``LONG_LABEL`` words or more is also matched across gaps of up to this many
text heights on one line (a sentence read with its colon or a word lost; see
:func:`candidates`)."""
MAX_EXTRA_WORDS = 2
"""A span may have this many words more than the label (OCR splits words)."""
SEEN = 3
"""How many of the nearest texts a failure lists."""
_LIGATURES = str.maketrans({"œ": "oe", "Œ": "oe", "æ": "ae", "Æ": "ae", "ø": "o", "Ø": "o",
                            "ł": "l", "Ł": "l", "ß": "ss", "’": "'"})


@dataclass(frozen=True, slots=True)
class Word:
    """One word as the OCR engine read it: ``conf`` 0..1, ``line`` groups a line's words."""

    text: str
    conf: float
    box: Box
    line: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """A place the label may be: the words read there, their score and box."""

    text: str
    score: float
    conf: float
    box: Box

    @property
    def centre(self) -> tuple[float, float]:
        left, top, w, h = self.box
        return left + w / 2, top + h / 2

    def describe(self) -> str:
        left, top, w, h = self.box
        return f"{self.text!r} {self.score:.2f} at ({left},{top},{w}x{h})"


@dataclass(frozen=True, slots=True)
class Decision:
    """``chosen`` when the label is found unambiguously; else ``error`` and ``detail``."""

    chosen: Candidate | None
    candidates: tuple[Candidate, ...]
    tie_broken_by: str | None = None
    error: str | None = None
    detail: str | None = None
    anchor_elsewhere: bool = False
    """The anchor image matched on none of the places read like the label."""


@functools.lru_cache(maxsize=8192)
def normalise(text: str) -> str:
    """Case, accents, ligatures, punctuation and spaces folded; words kept apart by one
    space (module docstring, point 1). Kept for the words of the last screens: a search
    matches the same words many times over."""
    decomposed = unicodedata.normalize("NFKD", text.translate(_LIGATURES)).casefold()
    kept = []
    for ch in decomposed:
        if unicodedata.combining(ch):
            continue
        kept.append(ch if ch.isalnum() else " ")
    return " ".join("".join(kept).split())


def _compact(text: str) -> str:
    return normalise(text).replace(" ", "")


def phrases(words: Sequence[Word], gap_heights: float = PHRASE_GAP) -> list[list[Word]]:
    """The words grouped by line and cut at gaps wider than ``gap_heights`` text heights
    (module docstring, point 2)."""
    lines: dict[int, list[Word]] = {}
    for w in words:
        if _compact(w.text):
            lines.setdefault(w.line, []).append(w)
    out: list[list[Word]] = []
    for line in lines.values():
        line.sort(key=lambda w: w.box[0])
        heights = sorted(w.box[3] for w in line)
        gap = gap_heights * heights[len(heights) // 2]
        current = [line[0]]
        for prev, word in itertools.pairwise(line):
            if word.box[0] - (prev.box[0] + prev.box[2]) > gap:
                out.append(current)
                current = []
            current.append(word)
        out.append(current)
    return out


def rows(words: Sequence[Word], gap_heights: float = SENTENCE_GAP) -> list[list[Word]]:
    """The words grouped by visual row, whatever the OCR's lines (it may read one row of
    text as several lines), cut at gaps wider than ``gap_heights`` text heights."""
    out: list[list[Word]] = []
    for w in sorted((w for w in words if _compact(w.text)), key=lambda w: w.box[0]):
        middle = w.box[1] + w.box[3] / 2
        for row in out:
            last = row[-1]
            h = max(last.box[3], w.box[3])
            gap = w.box[0] - (last.box[0] + last.box[2])
            if abs(middle - (last.box[1] + last.box[3] / 2)) <= h / 2 \
                    and -h / 2 <= gap <= gap_heights * h:
                row.append(w)
                break
        else:
            out.append([w])
    return out


def union(words: Sequence[Word]) -> Box:
    left = min(w.box[0] for w in words)
    top = min(w.box[1] for w in words)
    right = max(w.box[0] + w.box[2] for w in words)
    bottom = max(w.box[1] + w.box[3] for w in words)
    return left, top, right - left, bottom - top


def _similarity(a: str, b: str) -> float:
    """1 - edit distance / the longer length: every extra, missing or wrong character
    counts (a looser ratio let "Enregistrer" match "Enregistrer sous" at 0.85)."""
    return float(Levenshtein.normalized_similarity(a, b))


def candidates(words: Sequence[Word], label: str) -> list[Candidate]:
    """One candidate per phrase, best first (module docstring, point 3). A label of
    ``LONG_LABEL`` words or more is also matched on a whole row, across gaps of up to
    ``SENTENCE_GAP`` (:func:`rows`): a lost colon or word leaves a wide gap inside a
    sentence, the OCR may read one row as several lines, and no two controls side by side
    read like a whole sentence; the two readings of one place are one candidate (the
    better)."""
    n_label = max(1, len(normalise(label).split()))
    found = group_candidates(phrases(words), label, n_label)
    if n_label >= WRAPPED_LABEL:
        # A long label wrapped on a narrow button: its lines stacked (docs/grounding.md,
        # rule 3); the whole stack must read as the label.
        found = _kept([*found, *group_candidates(stacks(words), label, n_label)])
    if n_label >= LONG_LABEL:
        found = _kept([*found, *group_candidates(rows(words), label, n_label)])
    return found


def _kept(found: Sequence[Candidate]) -> list[Candidate]:
    """The best candidate of each place (two readings of one place are one candidate)."""
    kept: list[Candidate] = []
    for c in sorted(found, key=lambda c: -c.score):
        if not any(contains(k.box, c.centre, 0) or contains(c.box, k.centre, 0) for k in kept):
            kept.append(c)
    return kept


def stacks(words: Sequence[Word]) -> list[list[Word]]:
    """Phrases stacked line under line (a label wrapped on a narrow button): the next
    line starts within ``WRAP_GAP`` text heights under the last, and their spans across
    overlap by half the narrower; the words in reading order. Only stacks of two lines
    or more."""
    groups: list[list[list[Word]]] = []
    for phrase in sorted(phrases(words), key=lambda p: union(p)[1]):
        left, top, w, h = union(phrase)
        for group in groups:
            last = union(group[-1])
            gap = top - (last[1] + last[3])
            shared = min(left + w, last[0] + last[2]) - max(left, last[0])
            if -h / 2 <= gap <= WRAP_GAP * max(h, last[3]) \
                    and shared >= 0.5 * min(w, last[2]):
                group.append(phrase)
                break
        else:
            groups.append([phrase])
    return [[w for phrase in group for w in phrase] for group in groups if len(group) > 1]


def _spans(group: Sequence[Word], target: str,
           n_label: int) -> Iterator[tuple[list[Word], str]]:
    """Every run of words of ``group`` that could be the label: up to ``MAX_EXTRA_WORDS``
    words more than it, and at most about twice its length; with its compact text."""
    texts = [_compact(w.text) for w in group]
    for i in range(len(group)):
        span = ""
        for j in range(i, min(len(group), i + n_label + MAX_EXTRA_WORDS)):
            span += texts[j]
            if len(span) > 2 * len(target) + 2:
                break
            yield list(group[i:j + 1]), span


def _candidate(chosen: Sequence[Word], score: float) -> Candidate:
    return Candidate(" ".join(w.text for w in chosen), round(score, 4),
                     round(min(w.conf for w in chosen), 4), union(chosen))


def runs(words: Sequence[Word], label: str, floor: float) -> list[Candidate]:
    """Every run of words of a row (:func:`rows`) whose text alone is at least ``floor``
    like the label, wherever it stands in its row: all of them, not the best per row,
    so that two copies on one row are two places."""
    target = _compact(label)
    if not target:
        return []
    n_label = max(1, len(normalise(label).split()))
    return [_candidate(chosen, score) for row in rows(words)
            for chosen, span in _spans(row, target, n_label)
            if (score := _similarity(target, span)) >= floor]


def group_candidates(grouped: list[list[Word]], label: str, n_label: int) -> list[Candidate]:
    """One candidate per group of words (its best span)."""
    target = _compact(label)
    if not target:
        return []
    found: list[Candidate] = []
    for phrase in grouped:
        total = sum(len(_compact(w.text)) for w in phrase)
        best: list[Word] | None = None
        best_score = 0.0
        for chosen, span in _spans(phrase, target, n_label):
            score = _similarity(target, span) * len(span) / total
            if best is None or score > best_score:
                best, best_score = chosen, round(score, 4)
        if best is not None:
            found.append(_candidate(best, best_score))
    found.sort(key=lambda c: -c.score)
    return found


def overlap(a: Box, b: Box) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def contains(box: Box, point: tuple[float, float], pad: float) -> bool:
    left, top, w, h = box
    return left - pad <= point[0] <= left + w + pad and top - pad <= point[1] <= top + h + pad


def decide(found: Sequence[Candidate], label: str, min_score: float = DEFAULT_MIN_SCORE,
           margin: float = DEFAULT_MARGIN, recorded: tuple[float, float] | None = None,
           anchor: Box | None = None) -> Decision:
    """Act on one candidate, or say why not (module docstring, point 4). ``recorded`` is
    the recorded position and ``anchor`` the anchor image's match, both in the same pixels
    as the candidates' boxes."""
    ranked = tuple(sorted(found, key=lambda c: -c.score))
    if not ranked or ranked[0].score < min_score:
        return Decision(None, ranked, error="target_not_found",
                        detail=f"no text like {label!r} (score >= {min_score}); "
                               + seen(ranked))
    best = ranked[0]
    contenders = [c for c in ranked if c.score >= best.score - margin
                  and not other_word(best, c)]
    under: list[Candidate] = []
    if anchor is not None:
        centre = (anchor[0] + anchor[2] / 2, anchor[1] + anchor[3] / 2)
        pad = max(anchor[2], anchor[3]) / 4
        under = [c for c in contenders if contains(c.box, centre, pad)]
        if not under:
            return Decision(None, ranked, error="ambiguous_target",
                            detail=f"the anchor image is at ({anchor[0]},{anchor[1]},"
                                   f"{anchor[2]}x{anchor[3]}), on none of the places that "
                                   f"read like {label!r}: " + seen(contenders),
                            anchor_elsewhere=True)
    if len(contenders) == 1:
        return Decision(best, ranked, tie_broken_by="anchor" if under else None)
    pick: Candidate | None = None
    how = None
    if len(under) == 1:
        pick, how = under[0], "anchor"
    elif recorded is not None:
        by_distance = sorted(contenders, key=lambda c: math.dist(c.centre, recorded))
        nearest, second = (math.dist(c.centre, recorded) for c in by_distance[:2])
        height = max(c.box[3] for c in contenders)
        if nearest <= NEAR * height and second >= TWIN_GAP * height:
            pick, how = by_distance[0], "position"
    if pick is None or pick.score < min_score:
        why = "" if pick is None else f" ({how} points at {pick.describe()}, too unlike it)"
        return Decision(None, ranked, error="ambiguous_target",
                        detail=f"{len(contenders)} places read like {label!r} and neither "
                               f"an anchor nor the recorded position tells them apart{why}: "
                               + seen(contenders))
    return Decision(pick, ranked, tie_broken_by=how)


SURE = 0.8
"""A word read with this confidence or more is what it reads (the near misses' bound,
agent/grounding/second_look.py)."""


def other_word(best: Candidate, c: Candidate) -> bool:
    """Whether ``c`` is surely another word than ``best``, which reads exactly as the
    label: both read surely, ``c`` not exactly ("Patient", a column's heading, beside
    the menu's "Patients"). It is no rival then, but a near miss read again closer before
    a click (docs/grounding.md, rule 4)."""
    return c is not best and best.score >= 1.0 and c.score < 1.0 \
        and min(best.conf, c.conf) >= SURE


def seen(found: Sequence[Candidate]) -> str:
    """What a failure says was on the screen: the nearest texts, their scores and boxes."""
    if not found:
        return "no text read there"
    return "seen " + "; ".join(c.describe() for c in found[:SEEN])
