"""The desktop executor's settings, from the environment (read once, at agent start).

=====================================  =======  ===============================================
variable                               default  meaning
=====================================  =======  ===============================================
RPA_HUMAN_CORRECTION_TIMEOUT_S         120      human-correction mode: how long a
                                                window-title guard waits for the person to
                                                bring up the expected window
LEA_DESKTOP_SCREENSHOT_FORMAT          jpeg     ``jpeg`` or ``png`` (report screenshots)
LEA_DESKTOP_SCREENSHOT_MAX_SIDE        1280     longest side of a report screenshot, pixels
LEA_DESKTOP_SCREENSHOT_QUALITY         70       JPEG quality (1-95)
LEA_DESKTOP_ANCHOR_MIN_SCORE           0.85     anchor match score below which the target is
                                                not found (and nothing is clicked)
LEA_DESKTOP_ANCHOR_SCALES              1.0,...  anchor scales tried, in order (agent/grounding/
                                                anchor.py)
LEA_DESKTOP_SCREEN_CHANGE_TIMEOUT_S    1.0      after a click, how long to wait for the
                                                screen to change before ``no_screen_change``
LEA_DESKTOP_INPUT_PAUSE_S              0.05     pause after each mouse/keyboard call
LEA_DESKTOP_TYPE_INTERVAL_S            0.01     pause between typed characters
LEA_OCR_LANGS                          fra      Tesseract languages the text targets are
                                                read in (docs/grounding.md)
LEA_OCR_TESSDATA                       (found)  the folder of their ``.traineddata`` files
LEA_OCR_MIN_SCORE                      0.8      text match score below which the target is
                                                not found (and nothing is clicked)
LEA_OCR_MARGIN                         0.15     a second place within this of the best
                                                score makes the target ambiguous unless
                                                the anchor or the recorded position decides
=====================================  =======  ===============================================

A bad value stops the agent at start with a message naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from agent.grounding import text
from agent.grounding.anchor import DEFAULT_MIN_SCORE, DEFAULT_SCALES
from agent.grounding.tesseract import DEFAULT_LANGS

T = TypeVar("T")

CORRECTION_TIMEOUT_ENV = "RPA_HUMAN_CORRECTION_TIMEOUT_S"


class ConfigError(ValueError):
    """An environment variable has a value the executor cannot use."""


@dataclass(frozen=True, slots=True)
class DesktopConfig:
    correction_timeout_s: float = 120.0
    screenshot_format: str = "jpeg"
    screenshot_max_side: int = 1280
    screenshot_quality: int = 70
    anchor_min_score: float = DEFAULT_MIN_SCORE
    anchor_scales: tuple[float, ...] = DEFAULT_SCALES
    screen_change_timeout_s: float = 1.0
    input_pause_s: float = 0.05
    type_interval_s: float = 0.01
    ocr_langs: str = DEFAULT_LANGS
    ocr_tessdata: str | None = None
    ocr_min_score: float = text.DEFAULT_MIN_SCORE
    ocr_margin: float = text.DEFAULT_MARGIN

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DesktopConfig:
        """Defaults overridden by the variables of the module docstring."""
        env = os.environ if env is None else env
        d = cls()

        def get(name: str, parse: Callable[[str], T], default: T,
                ok: Callable[[T], bool], rule: str) -> T:
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                return default
            try:
                value = parse(raw.strip())
            except ValueError as exc:
                raise ConfigError(f"{name}={raw!r}: {rule}") from exc
            if not ok(value):
                raise ConfigError(f"{name}={raw!r}: {rule}")
            return value

        def scales(raw: str) -> tuple[float, ...]:
            return tuple(float(p) for p in raw.split(",") if p.strip())

        return cls(
            correction_timeout_s=get(CORRECTION_TIMEOUT_ENV, float, d.correction_timeout_s,
                                     lambda v: 0 <= v <= 3600, "seconds, 0..3600"),
            screenshot_format=get("LEA_DESKTOP_SCREENSHOT_FORMAT", str.lower,
                                  d.screenshot_format, lambda v: v in ("jpeg", "png"),
                                  "jpeg or png"),
            screenshot_max_side=get("LEA_DESKTOP_SCREENSHOT_MAX_SIDE", int,
                                    d.screenshot_max_side, lambda v: 64 <= v <= 16384,
                                    "pixels, 64..16384"),
            screenshot_quality=get("LEA_DESKTOP_SCREENSHOT_QUALITY", int,
                                   d.screenshot_quality, lambda v: 1 <= v <= 95, "1..95"),
            anchor_min_score=get("LEA_DESKTOP_ANCHOR_MIN_SCORE", float, d.anchor_min_score,
                                 lambda v: 0 < v <= 1, "a score in (0, 1]"),
            anchor_scales=get("LEA_DESKTOP_ANCHOR_SCALES", scales, d.anchor_scales,
                              lambda v: 0 < len(v) <= 20 and all(0.25 <= s <= 4 for s in v),
                              "comma-separated scales, 0.25..4, at most 20"),
            screen_change_timeout_s=get("LEA_DESKTOP_SCREEN_CHANGE_TIMEOUT_S", float,
                                        d.screen_change_timeout_s, lambda v: 0 <= v <= 30,
                                        "seconds, 0..30"),
            input_pause_s=get("LEA_DESKTOP_INPUT_PAUSE_S", float, d.input_pause_s,
                              lambda v: 0 <= v <= 2, "seconds, 0..2"),
            type_interval_s=get("LEA_DESKTOP_TYPE_INTERVAL_S", float, d.type_interval_s,
                                lambda v: 0 <= v <= 1, "seconds, 0..1"),
            ocr_langs=get("LEA_OCR_LANGS", str, d.ocr_langs,
                          lambda v: bool(v) and all(p.isalnum() or p == "_" for p in
                                                    v.replace("+", " ").split()),
                          "Tesseract language codes joined by +, e.g. fra+eng"),
            ocr_tessdata=get("LEA_OCR_TESSDATA", str, d.ocr_tessdata, lambda v: bool(v),
                             "a folder"),
            ocr_min_score=get("LEA_OCR_MIN_SCORE", float, d.ocr_min_score,
                              lambda v: 0 < v <= 1, "a score in (0, 1]"),
            ocr_margin=get("LEA_OCR_MARGIN", float, d.ocr_margin, lambda v: 0 <= v < 1,
                           "a score difference in [0, 1)"),
        )
