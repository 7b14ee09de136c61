"""One item of a row of items set about a text height apart (a menu bar), taken only
where the recording points at it (docs/grounding.md, "Items of a menu bar"). Pure: words
in, a decision out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agent.grounding.text import (
    ITEM_GAP,
    NEAR,
    Box,
    Decision,
    Word,
    contains,
    group_candidates,
    normalise,
    overlap,
    phrases,
    runs,
    seen,
)


def item_by_place(words: Sequence[Word], label: str, min_score: float, margin: float,
                  recorded: tuple[float, float] | None, anchor: Box | None,
                  also: Sequence[Word] = ()) -> Decision:
    """The label as one item of a row of items set about a text height apart (a menu
    bar: closer than ``PHRASE_GAP``, so one phrase), taken only where the recording
    points at it: under the anchor's match, or else within ``NEAR`` text heights of the
    recorded position. Terminal text sets its words as far apart, so such a cut alone
    would make a word of a sentence a control: without the place it is never acted on,
    and a second place where the label reads as a run of words, in any phrase, is a
    rival (docs/grounding.md, "Items of a menu bar"). ``also``: another reading of the
    same monitor, whose runs of words are rivals too."""
    loose = [c for c in group_candidates(phrases(words, ITEM_GAP), label,
                                    max(1, len(normalise(label).split())))
             if c.score >= min_score]
    if not loose or (recorded is None and anchor is None):
        return Decision(None, tuple(loose), error="target_not_found",
                        detail=f"no text like {label!r} (score >= {min_score}); "
                               + seen(loose))
    best = max(loose, key=lambda c: c.score)
    # A run that takes in the chosen words ("ici Édition" for a misread "Fichier
    # Édition") is the same place, not a second one.
    elsewhere = [c for reading in (words, also)
                 for c in runs(reading, label, min_score - margin)
                 if not overlap(best.box, c.box)]
    if elsewhere:
        return Decision(None, (best, *elsewhere), error="ambiguous_target",
                        detail=f"{label!r} reads as an item at {best.describe()}, and also "
                               "as words elsewhere: " + seen(elsewhere))
    if anchor is not None:
        centre = (anchor[0] + anchor[2] / 2, anchor[1] + anchor[3] / 2)
        at = contains(best.box, centre, max(anchor[2], anchor[3]) / 4)
        how = "anchor"
    else:
        assert recorded is not None
        at = math.dist(best.centre, recorded) <= NEAR * best.box[3]
        how = "position"
    if not at:
        return Decision(None, (best,), error="target_not_found",
                        detail=f"{label!r} reads as an item of a row at {best.describe()}, "
                               f"but the recorded {how} is not there")
    return Decision(best, (best,), tie_broken_by=how)

