"""Did the screen make progress? One replay's recent frames, judged tile by tile
(docs/loop-detection.md has the rules with the cases that made them).

Tiles are 8x8 screen pixels (pixel.py); a transition is the screen after one step against
the screen after the step before, judged when it arrives from what came before it only,
and taken back by the one after it in two cases: a wait's, where the screen moves on
beside what the first wait saw change (``_second_look``); an action's that was progress
only because content renewed away from the window acted in and renews again at the next
step (``_renewed_again``: ``top``, not a window opened; a window opens once).

Where the step acted is known (site.py): progress is a tile changed *there* that is not a
place seen changing by itself (changed away from where steps acted or during a wait, for
``memory`` transitions, with the tiles and 40-pixel blocks around them; near text typed,
only the tiles next to them). Typing, a key, a click that moved the pointer or came back
to the last input's point after a key need content no frame of the ring showed
(``novel_only``; a click that went back over a large area, seen_states.py; a caret's
blink). After a click that moved the pointer, a faint change under its two positions is
its hover highlight (``trail_tint``). In the window acted in, away from the site: what
the action caused (``window_min`` tiles of new content on tiles steady lately), and a
place that answers it (action_answers.py). A wait is progress when ``wait_min`` tiles
changed outside the places that change by themselves.

Nowhere known (an older agent): the whole screen, where a change is progress on tiles that
had not changed in the ``memory`` transitions before, outside blocks that keep changing.
Anywhere, a large area (``big_fraction`` of the tiles) of content no frame of the ring
showed is progress (a new screen, a dialog), and its tiles start afresh.

Noise seen for the first time at an action counts as progress (a busy desktop's first
changes) unless taken back as above: a pause can come a step late, never early. Memory is
bounded: ``ring_size`` reduced frames, their transitions' masks, two 16-bit registers per
tile and an 8-bit one per block.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from actors.loop_detector.action_answers import answering, label_changed
from actors.loop_detector.history_records import (
    DEFAULT_HISTORY,
    HistoryParams,
    Judgement,
    Transition,
)
from actors.loop_detector.pixel import DEFAULT_PIXEL, Frame, PixelParams, tile_difference
from actors.loop_detector.seen_states import least_differences, went_back
from actors.loop_detector.tile_masks import (
    Mask,
    as_tiles,
    blocks_of,
    box_of,
    caret_change,
    dilate,
    inner_of,
    noise_around,
    popcount8,
    zone,
)

__all__ = ["HistoryParams", "Judgement", "ScreenHistory", "Transition"]


@dataclass(frozen=True, slots=True)
class _Judged:
    """One transition judged where its step acted (or in a wait, or blind)."""

    progress: bool
    ambient_now: Mask
    """Tiles that changed by themselves at this transition (remembered as noise)."""
    at_site: int = -1
    ignored: int = 0
    loose: Mask | None = None
    caused: Mask | None = None
    pending: Mask | None = None


@dataclass(frozen=True, slots=True)
class _Context:
    """What the stages of one ``push`` share: the tiles that changed and the history's
    view of the places that change by themselves."""

    frame: Frame
    changed: Mask
    window: np.uint16
    """The register bits of the transitions remembered (``memory``, fewer at the start)."""
    noisy: Mask
    """Places seen changing by themselves, and the tiles and blocks around them."""
    hot: Mask
    """Blocks that changed at ``hot_changes`` of the ``hot_window`` transitions before."""
    cool: Mask
    """The tiles of the blocks that are not hot."""
    ambient: Mask
    """The places seen changing by themselves, alone."""


class ScreenHistory:
    """The frames after a replay's recent steps and what changed between them."""

    def __init__(self, ring_size: int, pixel: PixelParams = DEFAULT_PIXEL,
                 params: HistoryParams = DEFAULT_HISTORY) -> None:
        if ring_size < 2:
            raise ValueError("a screen history needs at least two frames")
        if not 1 <= params.memory <= 16 or not 1 <= params.hot_window <= 8:
            raise ValueError("memory must be within 1..16 transitions, hot_window 1..8")
        self.pixel = pixel
        self.params = params
        self.frames: deque[Frame] = deque(maxlen=ring_size)
        self.transitions: deque[Transition] = deque(maxlen=ring_size - 1)
        self._changes: npt.NDArray[np.uint16] | None = None  # bit i: changed i transitions ago
        self._ambient: npt.NDArray[np.uint16] | None = None  # ... by itself, i transitions ago
        self._blocks: npt.NDArray[np.uint8] | None = None  # the same, per block
        self._seen = 0  # transitions since the last reset
        self._serial = 0
        self._cut = 0  # transitions up to this serial no longer count toward a static run
        self._nearest: npt.NDArray[np.uint8] | None = None  # for the frame being pushed
        self._nearest_glyph: npt.NDArray[np.uint8] | None = None  # the same, by glyph

    @property
    def captures(self) -> int:
        """Frames in the ring since the last reset or cut."""
        after_cut = sum(1 for t in self.transitions if t.serial > self._cut)
        return min(len(self.frames), after_cut + 1)

    def reset(self) -> None:
        """Forget everything (another screen size, or the embedder failed)."""
        self.frames.clear()
        self.transitions.clear()
        self._changes = self._blocks = self._ambient = None
        self._seen = 0

    def cut(self) -> None:
        """Start a new run: what happened so far no longer counts toward a static run (after
        a pause), while the tiles' activity is kept (a clock is still a clock)."""
        self._cut = self._serial

    def tiles(self, frame: Frame) -> tuple[int, int]:
        """The tile grid of ``frame``."""
        t = self.pixel.tile
        return -(-frame.shape[0] // t), -(-frame.shape[1] // t)

    def push(self, frame: Frame, site: Mask | None = None, observation: bool = False,
             novel_only: bool = False, acted_in: Mask | None = None,
             trail: Mask | None = None, keyboard: str = "", action: str = "") -> int | None:
        """Add the frame after a step; the serial of the transition it makes, if any.

        ``site``: the tiles where the step's action acted (site.py), None if unknown;
        ``observation``: the step was a wait (it acted nowhere); ``novel_only``: at the
        site, only content no frame of the ring showed counts (a key pressed where the
        caret blinks: the caret going back to a state seen is no progress); ``acted_in``:
        the tiles of the window acted in, if known; ``trail``: after a click that moved
        the pointer, the spots under its previous and new positions, where a faint change
        (``trail_tint``) is the hover highlight following it: no change of the screen's
        content, neither progress nor the screen moving by itself; ``keyboard``: the step
        typed (``type``) or pressed a key (``key_combo``), ``""`` otherwise; ``action``: the
        identity of the step's action (action_answers.py)."""
        if self.frames and self.frames[-1].shape != frame.shape:
            self.reset()  # another resolution or monitor: nothing to compare with
        if not self.frames:
            self.frames.append(frame)
            return None
        self._nearest = self._nearest_glyph = None
        ctx = self._context(frame, trail, acted_in)
        if observation:
            judged = self._judge_wait(ctx)
        elif site is not None:
            judged = self._judge_at_site(ctx, site, novel_only, acted_in, keyboard, action)
        else:
            judged = self._judge_blind(ctx)
        last = self.transitions[-1].changed if self.transitions else None
        if last is not None and last.shape != ctx.changed.shape:
            last = None
        renewed, renewed_away = self._renewal(ctx, acted_in, last, judged.progress)
        if acted_in is not None and not observation:
            self._renewed_again(ctx.changed, acted_in, self.params.wait_min)
        self._remember(ctx, judged, renewed, renewed_away, last, action or "wait")
        return self._serial

    # The stages of push ------------------------------------------------------------------

    def _context(self, frame: Frame, trail: Mask | None, acted_in: Mask | None) -> _Context:
        """The tiles that changed since the last frame (but the pointer's faint trail),
        and what the registers say of the places that change by themselves."""
        p = self.params
        difference = tile_difference(self.frames[-1], frame, self.pixel)
        changed: Mask = difference > self.pixel.level
        if trail is not None:
            changed &= ~(trail & (difference <= p.trail_tint))
        if self._changes is None or self._blocks is None or self._ambient is None:
            self._changes = np.zeros(changed.shape, np.uint16)
            self._ambient = np.zeros(changed.shape, np.uint16)
            self._blocks = np.zeros(blocks_of(changed, p.block).shape, np.uint8)
        window = np.uint16((1 << min(self._seen, p.memory)) - 1)
        hot = popcount8(self._blocks & np.uint8((1 << p.hot_window) - 1)) >= p.hot_changes
        cool = as_tiles(~hot, p.block, changed.shape)
        # Places seen changing by themselves (in a wait, or away from where steps acted).
        ambient = (self._ambient & window) != 0
        noisy = noise_around(ambient, acted_in, p.ambient_reach, p.block)
        return _Context(frame, changed, window, noisy, hot, cool, ambient)

    def _judge_wait(self, ctx: _Context) -> _Judged:
        """A wait acted nowhere: progress when ``wait_min`` tiles changed outside the places
        that change by themselves; all it saw change may be the screen moving by itself."""
        loose = ctx.changed & ~ctx.noisy
        self._second_look(ctx.changed)
        return _Judged(int(np.count_nonzero(loose)) >= self.params.wait_min, ctx.changed,
                       ignored=int(np.count_nonzero(ctx.changed & ctx.noisy)), loose=loose)

    def _judge_at_site(self, ctx: _Context, site: Mask, novel_only: bool,
                       acted_in: Mask | None, keyboard: str, action: str) -> _Judged:
        """Progress where the step acted, or what it caused elsewhere in its window."""
        here = ctx.changed & site
        if novel_only:
            here = self._novel(here, ctx.frame)
            seen = ctx.changed & ~self._novel(ctx.changed, ctx.frame)
            if not keyboard and went_back(seen, here, self._big(ctx.changed),
                                          self.params.window_min):
                here = np.zeros_like(here)
        noisy = ctx.noisy
        if keyboard:
            # Text appears where it is typed, it does not move: only the tiles next to
            # those seen changing by themselves are noise there, not their whole blocks
            # (a clock's digit below a field is no reason to ignore what is typed in it).
            noisy = noisy & dilate(ctx.ambient, self.params.text_reach)
        at_site = int(np.count_nonzero(here))
        ignored = int(np.count_nonzero(here & noisy))
        progress = at_site > ignored
        if progress and keyboard and caret_change(
                self.frames[-1], ctx.frame, here & ~noisy, self.pixel.tile, self.pixel.level
        ) and (
                keyboard == "key_combo" or (ctx.changed & site & ~here).any()):
            # A caret's blink, in a phase no frame of the ring showed; after typing, beside
            # text that came back as it was (a character typed again after BackSpace).
            progress = False
        ambient_now = ctx.changed & ~site
        if acted_in is None:
            return _Judged(progress, ambient_now, at_site, ignored)
        away = ctx.changed & acted_in & ~site
        caused = self._caused(away & ~ctx.noisy, ctx.frame, ctx.window)
        # Noise or not: a place that answers the action changed at no other step.
        new = self._novel(away & ~caused, ctx.frame, glyph=True)
        answer = answering(new, action, self.transitions)
        assert self._changes is not None
        # A first change vouched for by nothing else must be clearly new content; where
        # the place answered this action before, any content not seen is (a '3' and a
        # '5' of a small counter differ by less than a change; docs/loop-detection.md).
        # (Tile by tile, not by glyph: a clock's first faint tick is no clear change.)
        clear = self._novel(new, ctx.frame, self.pixel.level)
        pending = clear & ~answer & ~ctx.noisy & ((self._changes & ctx.window) == 0)
        progress = progress or bool(caused.any()) or bool(answer.any()) or label_changed(
            pending, self.frames[-1], ctx.frame, self._seen >= self.params.steady_min,
            self.pixel)
        # Its edge tiles changed with it (a row shares tiles with the row above); what
        # answers the action is not the screen moving by itself either.
        ambient_now &= ~(dilate(caused, 1) | answer)
        return _Judged(progress, ambient_now, at_site, ignored, caused=caused | answer,
                       pending=pending)

    def _judge_blind(self, ctx: _Context) -> _Judged:
        """Nowhere known: the whole screen, where a change is progress when it lands on
        tiles that had not changed lately, outside blocks that keep changing."""
        assert self._changes is not None
        fresh = (self._changes & ctx.window) == 0
        progress = bool((ctx.changed & fresh & ctx.cool & ~ctx.noisy).any())
        return _Judged(progress, np.zeros_like(ctx.changed))

    def _big(self, changed: Mask) -> int:
        """Tiles of new content that make a new screen or a dialog."""
        return max(self.params.big_min, math.ceil(self.params.big_fraction * changed.size))

    def _renewal(self, ctx: _Context, acted_in: Mask | None, last: Mask | None,
                 progress: bool) -> tuple[bool, Mask | None]:
        """Whether a large area changed to content no frame of the ring showed (a new
        screen, a dialog: progress anywhere), and, if that alone is progress and lies
        entirely away from the window acted in, those tiles (``_renewed_again``)."""
        candidates = ctx.changed & ~ctx.noisy
        if acted_in is not None and last is not None:
            # Away from the window acted in, content renewing at two transitions in a row
            # (another program's display: top) is no new screen; a dialog opens once.
            candidates &= acted_in | ~zone(last, self.params.block)
        big = self._big(ctx.changed)
        if int(np.count_nonzero(candidates)) < big:
            return False, None
        renewed = int(np.count_nonzero(self._novel(candidates, ctx.frame))) >= big
        # The window's edge tiles hold the pixels of both sides (another window's log
        # beside it), as in tile_masks.py noise_around.
        if renewed and not progress and acted_in is not None and not (
                candidates & inner_of(acted_in)).any():
            return True, candidates
        return renewed, None

    def _remember(self, ctx: _Context, judged: _Judged, renewed: bool,
                  renewed_away: Mask | None, last: Mask | None, action: str) -> None:
        """The registers shifted by this transition, the frame and the transition kept."""
        assert self._changes is not None and self._blocks is not None
        assert self._ambient is not None
        block_changed = blocks_of(ctx.changed, self.params.block)
        # A uint16 shift drops the oldest bit: the register remembers 16 transitions.
        changes = ((self._changes << 1) | ctx.changed).astype(np.uint16)
        blocks = ((self._blocks << 1) | block_changed).astype(np.uint8)
        ambient_now = judged.ambient_now
        if renewed:
            # A new screen or dialog: its tiles start afresh (typing into it is progress);
            # not the hot blocks (a clock) that changed meanwhile; it is no noise either.
            changes[ctx.changed & ctx.cool] = 0
            blocks[block_changed & ~ctx.hot] = 0
            # Unless it keeps renewing: content new at two transitions in a row (top's
            # numbers) is moving by itself, a dialog opens once.
            again = last if last is not None else ctx.noisy
            ambient_now = ambient_now & (ctx.noisy | again)
        self._ambient = ((self._ambient << 1) | ambient_now).astype(np.uint16)
        self._changes, self._blocks = changes, blocks
        self._seen += 1
        self._serial += 1
        self.frames.append(ctx.frame)
        self.transitions.append(Transition(
            self._serial, ctx.changed, judged.progress or renewed, judged.at_site,
            judged.ignored, judged.loose, renewed_away=renewed_away, action=action,
            caused=judged.caused, pending=judged.pending))

    def _renewed_again(self, changed: Mask, acted_in: Mask, least: int) -> None:
        """The transition before was progress only because another window's content
        renewed (away from the window acted in, where the action could not draw): if that
        content changes again now, over ``least`` tiles at least (a log that scrolled a
        few lines since), it was that program moving by itself (``top``, ``vmstat``),
        seen for the first time at a replay's first step, not what the action opened (a
        window opens once, then stays as it is). Its progress is taken back."""
        last = self.transitions[-1] if self.transitions else None
        if (last is None or last.renewed_away is None or not last.progress
                or last.serial <= self._cut or last.renewed_away.shape != changed.shape):
            return
        if int(np.count_nonzero(changed & last.renewed_away & ~acted_in)) >= least:
            self.transitions[-1] = replace(last, progress=False, second_look=True)

    def _novel(self, mask: Mask, frame: Frame, level: int | None = None,
               glyph: bool = False) -> Mask:
        """Of ``mask`` (tiles changed against the last frame), those whose content no
        earlier frame of the ring showed either: going back to a state seen is no change.
        A tile shows a state seen when it differs from an older frame by at most ``level``
        (default ``seen_level``: the same content, JPEG coding it the same way).

        ``glyph``: one older frame must show both halves of a glyph (seen_states.py), for
        small content away from the site (a label's digit, a counter); not at the site,
        where the control beside the change (the button of a menu that opened) often
        changes state of its own. Worked out once per push."""
        if self._nearest is None or self._nearest_glyph is None:
            self._nearest, self._nearest_glyph = least_differences(
                list(self.frames)[:-1], self.frames[-1], frame, self.pixel,
                self.params.seen_level)
        least = self._nearest_glyph if glyph else self._nearest
        return mask & (least > (self.params.seen_level if level is None else level))

    def _caused(self, away: Mask, frame: Frame, window: np.uint16) -> Mask:
        """Of ``away`` (changed in the window acted in, away from the site, outside the
        places seen changing by themselves), what the action may have caused: at least
        ``window_min`` tiles that had not changed lately (a clock's digits, a caret, a
        spinner change the same tiles again and again) to content no frame of the ring
        showed (a toggle switched back, a hover highlight gone and back, is no change).
        Empty if fewer."""
        fresh = away & ((self._changes & window) == 0) if self._changes is not None else away
        if int(np.count_nonzero(fresh)) < self.params.window_min:
            return np.zeros_like(away)
        novel = self._novel(fresh, frame)
        if int(np.count_nonzero(novel)) < self.params.window_min:
            return np.zeros_like(away)
        return novel

    def _second_look(self, changed: Mask) -> None:
        """A wait right after a wait: what the one before saw appear is judged again.

        No action acted during either wait. Where the screen changes now in new places
        next to what changed then (a second hand, a spinner, ``top``'s numbers moving on),
        what changed then was the screen moving by itself, seen for the first time: it is
        no progress unless ``wait_min`` of its tiles lie away from those places. A window
        that appeared and stayed is not touched; nor one that closed again (its tiles
        change again, but nothing moves on beside them)."""
        last = self.transitions[-1] if self.transitions else None
        if (last is None or last.loose is None or not last.progress
                or last.serial <= self._cut or last.loose.shape != changed.shape):
            return
        moved_on = changed & ~last.changed
        kept = last.loose & ~(dilate(moved_on, self.params.ambient_reach)
                              | self._zoned(moved_on))
        if int(np.count_nonzero(kept)) < self.params.wait_min:
            self.transitions[-1] = replace(last, progress=False, second_look=True)

    def _zoned(self, mask: Mask) -> Mask:
        return zone(mask, self.params.block)

    def progressed(self, serial: int) -> bool | None:
        """Whether transition ``serial`` was progress; None if it is no longer remembered."""
        found = next((t for t in self.transitions if t.serial == serial), None)
        return None if found is None else found.progress

    def judge(self) -> Judgement:
        """How many of the latest transitions (since the last cut), in a row, made no
        progress, and what changed meanwhile."""
        run, ignored, at_site = 0, None, 0
        for t in reversed(self.transitions):
            if t.serial <= self._cut or t.progress:
                break
            run += 1
            at_site += max(0, t.at_site)
            ignored = t.changed.copy() if ignored is None else ignored | t.changed
        if ignored is None:
            return Judgement(run, 0)
        return Judgement(run, int(np.count_nonzero(ignored)), at_site, box_of(ignored))
