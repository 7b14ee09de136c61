"""The identity check of a verify_screen, for every executor: what the screen shows where
the step looks (the OCR grounding on a real screen, the banner of the simulated desktop),
judged by workflow/identity.py (docs/screens-and-pauses.md, "The patient's identity")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PIL import Image

from agent.executors.base import ActionOutcome
from agent.executors.desktop_text import TextSettings
from agent.grounding.text import Word
from workflow.identity import (
    IDENTITY_MISMATCH,
    IdentityCheck,
    IdentitySpecError,
    identity_check,
    verdict,
)


class Unreadable(RuntimeError):
    """The screen cannot be read here (no OCR engine): never a pass."""


def check_identity(parameters: dict[str, Any], read: Callable[[IdentityCheck], str],
                   method: str | None = None) -> ActionOutcome:
    """Pass when what ``read`` returns holds the expected text and no other identifier;
    else ``identity_mismatch`` with what was read. Unreadable screen, unusable parameters:
    a person looks (fail closed)."""
    try:
        check = identity_check(parameters)
    except IdentitySpecError as exc:
        return ActionOutcome.failure(f"invalid_parameters:{exc}", needs_human=True)
    if check is None:
        return ActionOutcome(success=True)
    try:
        seen = verdict(check, read(check))
    except Unreadable as exc:
        seen = f"écran illisible : {exc}"
    if seen is None:
        return ActionOutcome(success=True, resolution_method=method)
    return ActionOutcome.failure(IDENTITY_MISMATCH, needs_human=True,
                                 target_description=seen, resolution_method=method)


def ocr_reader(image: Image.Image, text: TextSettings) -> Callable[[IdentityCheck], str]:
    """What the OCR reads in ``image`` (the monitor, captured now), in the check's region
    if it has one; lines in reading order."""

    def read(check: IdentityCheck) -> str:
        if text.read is None:
            raise Unreadable(text.unavailable)
        shot = image
        if check.region is not None:
            x, y, w, h = check.region
            W, H = image.size
            shot = image.crop((round(x * W), round(y * H), round((x + w) * W),
                               round((y + h) * H)))
        return lines(text.read(shot))

    return read


def lines(words: list[Word]) -> str:
    """The words in reading order, one line of text per OCR line."""
    by_line: dict[int, list[str]] = {}
    for word in sorted(words, key=lambda wd: (wd.line, wd.box[0])):
        by_line.setdefault(word.line, []).append(word.text)
    return "\n".join(" ".join(line) for line in by_line.values())
