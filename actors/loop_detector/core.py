"""The loop detector's decisions: three signals over bounded per-replay rings
(docs/screens-and-pauses.md).

- A ``screen_static``: ``RPA_LOOP_SCREEN_STATIC_N`` captures in a row with no progress
  between them, judged first where each action acted (site.py, screen_history.py; with
  ``clip``, CLIP may veto, clip.py). Waits are captures too: waiting for a screen that
  never comes is stuck.
- B ``action_repeat``: ``RPA_LOOP_ACTION_REPEAT_N`` identical actions in a row (type,
  target, parameters, position) that changed nothing where they acted. Where no frame
  tells, the identity alone decides, as in the spec. Pressing Tab three times moves the
  focus each time: that is progress, not a loop.
- C ``retry_threshold``: a failed step retried ``RPA_LOOP_RETRY_THRESHOLD`` times.

One positive signal is enough; they are tried in that order. A looks at inputs that were
performed (a successful click, double/right click, type, key_combo, scroll) and at waits;
B at performed inputs only; ``verify_screen`` is not judged, and failed attempts are C's
business. After a positive verdict the runs start again from the current screen,
so after a person resumes, N-1 more steps without progress are needed for another pause.

A replay's rings are made at its first performed input or wait (or positive verdict), freed by
``forget``, or by the LRU beyond ``RPA_LOOP_MAX_REPLAYS``.

No sockets and no clock here: the shell (process.py) feeds observations and publishes the
notices returned.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from loguru import logger

from actors.loop_detector.clip import Vector, cosine
from actors.loop_detector.config import LoopConfig
from actors.loop_detector.pixel import BadScreenshot, Frame
from actors.loop_detector.screen_history import Judgement, ScreenHistory
from actors.loop_detector.site import Box, Site, box_mask, point_of, pointer_spots, site_of
from messages import events
from messages.loop import LOOP_DETECTED, LoopVerdict, ObserveStep

INPUT_TYPES: Final = frozenset(
    {"click", "double_click", "right_click", "type", "key_combo", "scroll"})
CLICKS: Final = frozenset({"click", "double_click", "right_click"})

NOT_DETECTED = LoopVerdict(detected=False)


class FrameSource(Protocol):
    """The pixel embedder (pixel.py)."""

    name: str

    def frame(self, data: bytes) -> Frame: ...


class VectorSource(Protocol):
    """The clip embedder (clip.py); ``ready`` once its model is loaded."""

    name: str

    @property
    def ready(self) -> bool: ...

    def embed(self, data: bytes) -> Vector: ...


@dataclass(frozen=True, slots=True)
class Notice:
    """A bus event for the shell to publish."""

    topic: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: LoopVerdict
    notices: list[Notice] = field(default_factory=list)


@dataclass(slots=True)
class _Step:
    signature: str
    label: str
    transition: int | None  # the screen transition this step made, if it had a frame


@dataclass(slots=True)
class _Rings:
    screen: ScreenHistory
    vectors: deque[Vector | None]
    steps: deque[_Step]
    last: tuple[str, LoopVerdict] | None = None  # the last action observed, its verdict
    typed: Box | None = None  # where keyboard input last went
    point: tuple[float, float] | None = None  # where the last input with a point acted
    site: str = ""  # where the last step acted, for people
    kind: str = ""  # the last input's action type

    def restart(self) -> None:
        """After a positive verdict: new runs start from the current screen; what the
        tiles did (a clock is still a clock) is kept."""
        self.screen.cut()
        self.steps.clear()


def signature(step: ObserveStep) -> tuple[str, str]:
    """(identity of the action, short label for people)."""
    target = dict(step.target or {})
    anchor = target.pop("anchor_image_base64", None)
    if anchor:
        target["anchor_sha1"] = hashlib.sha1(str(anchor).encode()).hexdigest()
    position = None
    if step.actual_position:
        position = {k: round(float(v), 2) for k, v in sorted(step.actual_position.items())}
    ident = json.dumps([step.action_type, target, step.parameters, position], sort_keys=True,
                       default=str)
    what = target.get("by_text") or target.get("vlm_description")
    if what is None and target.get("x_pct") is not None:
        what = f"{target.get('x_pct')},{target.get('y_pct')}"
    label = step.action_type + (f" {str(what)[:60]}" if what else "")
    return ident, label


def control_of(step: ObserveStep) -> str:
    """The action as the control it acts on, for the places that answer it
    (action_answers.py): its identity (``signature``) with the target's point rounded as
    the position is. A grounding a pixel apart between two presses of one button is the
    same button: its status line answers both (docs/loop-detection.md)."""
    target = step.target
    if target is not None and target.get("x_pct") is not None:
        target = {**target, **{k: round(float(target[k]), 2) for k in ("x_pct", "y_pct")
                               if target.get(k) is not None}}
    return signature(step.model_copy(update={"target": target}))[0]


class LoopDetectorCore:
    """Per-replay rings (bounded, LRU over replays) and the three signals."""

    def __init__(self, config: LoopConfig, pixel: FrameSource | None,
                 clip: VectorSource | None = None) -> None:
        self.config = config
        self.pixel = pixel
        self.clip = clip
        self.screen_signal = pixel is not None
        """Signal A is on: an embedder that is missing or raises turns it off."""
        self.failures = 0
        self._warned: set[str] = set()
        self._replays: OrderedDict[str, _Rings] = OrderedDict()
        self.evicted = 0
        """Replays forgotten so far because more than ``max_replays`` were observed at once."""
        self.last_evicted: str | None = None

    # Embedders --------------------------------------------------------------------------

    def _warn_once(self, key: str, embedder: str, error: str, effect: str) -> list[Notice]:
        """One warning log and one event per kind of embedder problem, then silence."""
        self.failures += 1
        if key in self._warned:
            logger.debug("loop_detector: {} failed again: {}", embedder, error)
            return []
        self._warned.add(key)
        logger.warning("loop_detector: embedder {} unavailable ({}): {}", embedder, error,
                       effect)
        return [Notice(events.LOOP_EMBEDDER_UNAVAILABLE,
                       {"embedder": embedder, "error": error[:500], "effect": effect})]

    def clip_unavailable(self, error: str, fallback: bool) -> list[Notice]:
        """The clip model did not load: ``fallback`` to pixel (``auto``), else A is off."""
        self.clip = None
        if fallback:
            return self._warn_once("clip_load", "clip", error, "pixel used instead (auto)")
        self.screen_signal = False
        return self._warn_once("clip_load", "clip", error, "screen_static disabled")

    # Replays ----------------------------------------------------------------------------

    def _rings(self, replay_id: str) -> _Rings:
        rings = self._replays.get(replay_id)
        if rings is None:
            size = self.config.ring_size
            rings = self._replays[replay_id] = _Rings(
                ScreenHistory(size), deque(maxlen=size), deque(maxlen=size))
            while len(self._replays) > self.config.max_replays:
                # Not logged here: beyond max_replays at once every step evicts one, and a
                # line each (hundreds a second) cost more than the step; the shell logs
                # the count (process.py).
                self.last_evicted, _ = self._replays.popitem(last=False)
                self.evicted += 1
        else:
            self._replays.move_to_end(replay_id)
        return rings

    def forget(self, replay_id: str) -> bool:
        return self._replays.pop(replay_id, None) is not None

    @property
    def replays(self) -> int:
        return len(self._replays)

    def judgement(self, replay_id: str) -> Judgement | None:
        """What a replay's screen history says now (bench/loop_eval.py prints how close
        progress sequences come to a pause); None if nothing is kept of it."""
        rings = self._replays.get(replay_id)
        return None if rings is None else rings.screen.judge()

    # Observations -----------------------------------------------------------------------

    def observe(self, step: ObserveStep) -> Outcome:
        """The verdict after ``step``; raises BadScreenshot (nothing changed) if its
        screenshot does not decode."""
        if not self.config.enabled:
            return Outcome(LoopVerdict(detected=False, evidence={"enabled": False}))
        known = self._replays.get(step.replay_id)
        if known is not None and known.last is not None and known.last[0] == step.action_id:
            # The same report observed again (a client's retry): same answer, no change.
            return Outcome(known.last[1])
        performed = step.success and step.action_type in INPUT_TYPES
        waited = step.success and step.action_type == "wait" and step.screenshot_after is not None
        if not (performed or waited) and known is None and self._retry_threshold(step) is None:
            # A wait, a verify_screen or a failure of a replay with nothing kept: only C
            # could fire, and it did not; nothing to keep either (a duplicate gets the same
            # answer). No rings are made (nor another replay's evicted) for it.
            return Outcome(NOT_DETECTED)
        notices: list[Notice] = []
        frame: Frame | None = None
        vector: Vector | None = None
        broken = False  # the embedder raised: the screen's continuity is lost
        if (performed or waited) and step.screenshot_after is not None and self.pixel is not None:
            try:
                frame = self.pixel.frame(step.screenshot_after)
            except BadScreenshot:
                raise
            except Exception as exc:
                broken = True
                notices += self._warn_once("pixel_raised", "pixel", repr(exc),
                                           "screen_static skipped for this step")
            clip = self.clip
            if frame is not None and self.screen_signal and clip is not None and clip.ready:
                try:
                    vector = clip.embed(step.screenshot_after)
                except BadScreenshot:
                    raise
                except Exception as exc:
                    frame, broken = None, True
                    notices += self._warn_once("clip_raised", "clip", repr(exc),
                                               "screen_static skipped for this step")
        # Everything that can fail has run: from here on, state changes.
        rings = self._rings(step.replay_id)
        transition = None
        if broken:
            rings.screen.reset()
            rings.vectors.clear()
        elif frame is not None:
            site: Site | None = site_of(step, rings.typed) if performed else None
            if site is not None and site.typed is not None:
                rings.typed = site.typed
            elif step.action_type in CLICKS:
                rings.typed = None  # the focus may have moved (site.py)
            rings.site = site.label if site is not None else (
                "wait" if waited else step.action_type)
            grid = rings.screen.tiles(frame)
            mask = None if site is None else box_mask(site.boxes, grid)
            window = step.site.window if step.site is not None and performed else None
            moved = _pointer_move(step, rings)
            transition = rings.screen.push(
                frame, mask, observation=waited,
                novel_only=moved is not None or step.action_type in ("type", "key_combo")
                or _back_at_point(step, rings),
                acted_in=None if window is None else box_mask((window,), grid),
                trail=None if moved is None else box_mask(pointer_spots(*moved), grid),
                keyboard=step.action_type if step.action_type in ("type", "key_combo") else "",
                action=control_of(step) if performed else "wait")
            if transition is None:  # a first frame, or the screen's size changed
                rings.vectors.clear()
            rings.vectors.append(vector)
        if performed:
            # The pointer stays where it was during a key or typing without a point.
            rings.point = point_of(step) or rings.point
            rings.kind = step.action_type
            ident, label = signature(step)
            rings.steps.append(_Step(ident, label, transition))
        verdict = ((self._screen_static(rings) if frame is not None else None)
                   or (self._action_repeat(rings) if performed else None)
                   or self._retry_threshold(step))
        if verdict is None:
            rings.last = (step.action_id, NOT_DETECTED)
            return Outcome(NOT_DETECTED, notices)
        rings.restart()
        rings.last = (step.action_id, verdict)
        notices.append(Notice(events.LOOP_DETECTED, {
            "replay_id": step.replay_id, "signal": verdict.signal,
            "evidence": verdict.evidence, "session_id": step.session_id,
            "action_id": step.action_id}))
        return Outcome(verdict, notices)

    def _screen_static(self, rings: _Rings) -> LoopVerdict | None:
        n = self.config.screen_static_n
        if not self.screen_signal or rings.screen.captures < n:
            return None
        judged = rings.screen.judge()
        if judged.static_run < n - 1:
            return None
        evidence: dict[str, Any] = {"captures": n, "last_step": rings.site,
                                    "changed_at_site": judged.at_site,
                                    "ignored_tiles": judged.ignored_tiles,
                                    "ignored_region": judged.region, "embedder": "pixel"}
        recent = list(rings.vectors)[-n:]
        pairs = [(a, b) for a, b in itertools.pairwise(recent)
                 if a is not None and b is not None]
        if pairs:
            low = min(cosine(a, b) for a, b in pairs)
            if low < self.config.screen_static_threshold:
                return None  # CLIP: not the same kind of screen any more
            evidence.update(embedder="pixel+clip", min_cosine=round(low, 4))
        return _verdict("screen_static", evidence)

    def _action_repeat(self, rings: _Rings) -> LoopVerdict | None:
        n = self.config.action_repeat_n
        steps = list(rings.steps)[-n:]
        if len(steps) < n or any(s.signature != steps[0].signature for s in steps):
            return None
        seen = [rings.screen.progressed(s.transition) for s in steps[1:]
                if s.transition is not None]
        if any(seen):
            return None  # the same action, but the screen moved on each time (Tab, Tab ...)
        changed = "no" if seen and all(v is False for v in seen) else "unknown"
        return _verdict("action_repeat", {"count": n, "action": steps[0].label,
                                          "screen_changed": changed})

    def _retry_threshold(self, step: ObserveStep) -> LoopVerdict | None:
        if step.success or step.retry_count < self.config.retry_threshold:
            return None
        return _verdict("retry_threshold", {
            "action_id": step.base_action_id, "retries": step.retry_count,
            "threshold": self.config.retry_threshold, "error": step.error or ""})


MOVED: Final = 0.002
"""A click this far (a fraction of the screen, ~4 px) from the last input's point moved the
pointer."""


def _pointer_move(step: ObserveStep, rings: _Rings
                  ) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The pointer's new and previous positions if ``step`` is a click that moved it
    (docs/screens-and-pauses.md). There, only content no frame of the ring showed counts
    (a hover highlight that left one control for another, then came back, is the pointer's
    trail, not progress), and a faint change at the two spots is the hover highlight
    itself (screen_history.py). A click at the same point keeps any change there: a check
    box ticked, then unticked. Typing or a key needs new content too (a character typed,
    then erased, goes back to a state seen), decided by the caller."""
    point, last = point_of(step), rings.point
    if step.action_type not in CLICKS or point is None or last is None:
        return None
    if max(abs(point[0] - last[0]), abs(point[1] - last[1])) <= MOVED:
        return None
    return point, last


def _back_at_point(step: ObserveStep, rings: _Rings) -> bool:
    """Whether ``step`` is a click at the point of the last input, after a key or typing
    there: only content no frame of the ring showed counts (docs/loop-detection.md). A
    menu opened, closed by Escape and opened again is a state seen; clicks in a row at
    one point keep any change (a check box ticked, then unticked)."""
    return step.action_type in CLICKS and rings.kind not in CLICKS and rings.kind != "" \
        and _pointer_move(step, rings) is None and point_of(step) is not None \
        and rings.point is not None


def _verdict(signal: str, evidence: dict[str, Any]) -> LoopVerdict:
    return LoopVerdict.model_validate({"detected": True, "reason": LOOP_DETECTED,
                                       "signal": signal, "evidence": evidence})
