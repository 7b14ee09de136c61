"""The patient's identity, checked on screen: is the text a step expects (built from the
run's inputs, e.g. the IPP in the patient banner) what the screen shows, and no other
identifier of its kind? (docs/screens-and-pauses.md, "The patient's identity").

Pure: the executors read the screen (OCR, or the simulated desktop) and ask here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

IDENTITY_MISMATCH = "identity_mismatch"
"""The error (and pause reason) of a failed identity check."""
MAX_SHOWN = 200
"""What was read is cut to this many characters in a report."""


class IdentitySpecError(ValueError):
    """The step's identity parameters are not usable (never a pass)."""


@dataclass(frozen=True, slots=True)
class IdentityCheck:
    expect_text: str
    identifier_pattern: re.Pattern[str] | None
    region: tuple[float, float, float, float] | None  # x, y, w, h: fractions of the monitor


def identity_check(parameters: dict[str, Any]) -> IdentityCheck | None:
    """The check a verify_screen's parameters ask for, None when they ask none."""
    expected = parameters.get("expect_text")
    if expected is None:
        return None
    if not isinstance(expected, str) or not _norm(expected):
        # Empty after substitution (an optional input not given): nothing would be checked.
        raise IdentitySpecError("expect_text must be a non-empty text")
    raw_pattern = parameters.get("identifier_pattern")
    pattern = None
    if raw_pattern is not None:
        try:
            pattern = re.compile(str(raw_pattern))
        except re.error as exc:
            raise IdentitySpecError(f"identifier_pattern: {exc}") from None
    return IdentityCheck(expected, pattern, _region(parameters.get("region")))


def _region(raw: Any) -> tuple[float, float, float, float] | None:
    if raw is None:
        return None
    try:
        x, y, w, h = (float(raw[k]) for k in ("x_pct", "y_pct", "w_pct", "h_pct"))
    except (KeyError, TypeError, ValueError):
        raise IdentitySpecError("region needs x_pct, y_pct, w_pct, h_pct") from None
    if not (0 <= x < 1 and 0 <= y < 1 and 0 < w <= 1 - x + 1e-9 and 0 < h <= 1 - y + 1e-9):
        raise IdentitySpecError("region must lie within the monitor (fractions 0..1)")
    return x, y, w, h


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def verdict(check: IdentityCheck, read: str) -> str | None:
    """None when ``read`` (what the screen shows where the check looks) holds the expected
    text and no other identifier of its kind; else what was read, for the report. Two
    identifiers where one is expected fail too: the screen cannot tell whose record it is."""
    expected, seen = _norm(check.expect_text), _norm(read)
    others: list[str] = []
    if check.identifier_pattern is not None:
        others = [m.group(0) for m in check.identifier_pattern.finditer(read)
                  if _norm(m.group(0)) not in expected]
    if expected in seen and not others:
        return None
    if others:
        return "autre identifiant lu : " + ", ".join(dict.fromkeys(others))[:MAX_SHOWN]
    shown = " ".join(read.split())[:MAX_SHOWN]
    return f"« {shown} »" if shown else "aucun texte"
