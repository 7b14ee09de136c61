"""verify_screen window-title guards and the human-correction mode
(docs/screens-and-pauses.md).

A guard names the window that must be in front (``expected_window_title_contains``: any of
the patterns, case-insensitive substring). It polls the active window's title for a short
while (``timeout_ms``, at most 2 s in the generated setup chain); on a mismatch it does not
fail at once: the person at the workstation gets ``correction_timeout_s`` (120 s by
default) to bring the right window up. If they do, the step succeeds with the warning
``setup_guard_window_mismatch`` and the correction is reported; if not, the step fails with
``needs_human`` and the dispatcher pauses the replay.

Pure logic: the title source, the clock and the sleep are passed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from loguru import logger

from agent.executors.base import ActionOutcome
from messages.workflow import Action

GUARD_MISMATCH = "setup_guard_window_mismatch"
TITLE_MISMATCH = "window_title_mismatch"
DEFAULT_GUARD_TIMEOUT_MS = 2000
MAX_GUARD_TIMEOUT_MS = 60_000
POLL_S = 0.1
MAX_PATTERNS = 50


WRONG_WINDOW = "wrong_window"
WINDOW_CHECK_S = 2.0
"""How long the window check may read before it answers: after an input naming
``expected_window_title``, the window may take that long to come up (a click that opens a
dialog: the title changes a few hundred ms later); before an input, the window in front may
be unknown that long (right after the previous input, between two windows)."""

T = TypeVar("T")


def read_until(read: Callable[[], T], settled: Callable[[T], bool], timeout_s: float,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> T:
    """Read until ``settled`` says the answer is definite or ``timeout_s`` has passed (one
    read at 0, then every POLL_S); the last read, settled or not: the caller fails closed on
    an answer that is still unknown (docs/screens-and-pauses.md)."""
    deadline = clock() + timeout_s
    while True:
        value = read()
        now = clock()
        if settled(value) or now >= deadline:
            return value
        sleep(min(POLL_S, deadline - now))


def title_after(outcome: ActionOutcome, action: Action, read_title: Callable[[], str | None],
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep,
                timeout_s: float = WINDOW_CHECK_S) -> ActionOutcome:
    """``outcome`` of a performed input, with warning ``wrong_window`` unless the window the
    action names (``expected_window_title``) is read in front within ``timeout_s``.

    Only a matching title ends the check early: another title may still give way to the
    expected one, and a title that cannot be read (often, for a moment, right after an
    input) is not a match. Still a success: the input happened and must not be redone; the
    dispatcher's rules (actors/dispatcher/machine/rules.py: ``report_pause``) pause the
    replay before the next step."""
    expected = action.expected_window_title
    if not expected or not outcome.success or action.type == "verify_screen":
        return outcome
    last = read_until(read_title, lambda title: title_matches_any(title, [expected]),
                      timeout_s, clock, sleep)
    why = title_mismatch(action, "expected_window_title", expected, last)
    if why is None:
        return outcome
    return replace(outcome, warning=WRONG_WINDOW, target_description=f"after the action, {why}")


def title_mismatch(action: Action, field: str, expected: str, title: str | None) -> str | None:
    """How ``title`` is not the window ``expected`` (action field ``field``), to report; None
    only if it is. A title that cannot be read is not the expected window (fail closed)."""
    if not title:
        logger.warning("{}: cannot read the active window title; {} {!r} not confirmed",
                       action.action_id, field, expected)
        return f"the window in front could not be read (expected {expected!r})"
    if title_matches_any(title, [expected]):
        return None
    return f"expected the window {expected!r} in front, got {title!r}"


class GuardSpecError(ValueError):
    """The guard's parameters are malformed."""


def title_matches_any(title: str | None, patterns: Sequence[str]) -> bool:
    """True if ``title`` contains any non-empty pattern, ignoring case."""
    if not title:
        return False
    folded = title.casefold()
    return any(p and p.casefold() in folded for p in patterns)


def guard_patterns(action: Action) -> list[str]:
    """The patterns of a verify_screen: ``parameters.expected_window_title_contains`` (a list
    or one string), else ``expected_window_title``; ``[]`` = no title guard."""
    raw = action.parameters.get("expected_window_title_contains")
    if raw is None:
        return [action.expected_window_title] if action.expected_window_title else []
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(p, str) for p in items):
        raise GuardSpecError("expected_window_title_contains must be a string or a list of "
                             "strings")
    patterns = [p for p in items if p.strip()]
    if not patterns or len(patterns) > MAX_PATTERNS:
        raise GuardSpecError(f"expected_window_title_contains needs 1..{MAX_PATTERNS} "
                             "non-empty patterns")
    return patterns


def guard_timeout_s(action: Action) -> float:
    """``parameters.timeout_ms``: how long the title may take to match (default 2 s)."""
    raw = action.parameters.get("timeout_ms", DEFAULT_GUARD_TIMEOUT_MS)
    if not isinstance(raw, int) or isinstance(raw, bool) or not 0 <= raw <= MAX_GUARD_TIMEOUT_MS:
        raise GuardSpecError(f"timeout_ms must be an integer, 0..{MAX_GUARD_TIMEOUT_MS}")
    return raw / 1000.0


@dataclass(frozen=True, slots=True)
class Watch:
    matched: bool
    title: str | None
    waited_s: float


def wait_for_title(patterns: Sequence[str], read_title: Callable[[], str | None],
                   timeout_s: float, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> Watch:
    """Poll the active title until it matches or ``timeout_s`` has passed (one look at 0)."""
    started = clock()
    while True:
        title = read_title()
        waited = clock() - started
        if title_matches_any(title, patterns):
            return Watch(True, title, waited)
        if waited >= timeout_s:
            return Watch(False, title, waited)
        sleep(min(POLL_S, max(0.0, timeout_s - waited)))


def check_window(patterns: Sequence[str], read_title: Callable[[], str | None],
                 guard_s: float, correction_s: float,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 on_mismatch: Callable[[dict[str, Any]], None] | None = None) -> ActionOutcome:
    """The guard, then the human-correction mode on a mismatch (module docstring).

    ``on_mismatch`` is told when the correction wait starts (what is expected, what is in
    front, how long the person has), so the agent can say so to the dispatcher and the
    person.
    """
    first = wait_for_title(patterns, read_title, guard_s, clock, sleep)
    if first.matched:
        logger.info("verify_screen guard OK: {!r} matches {}", first.title, list(patterns))
        return ActionOutcome(success=True)
    if on_mismatch is not None:
        try:
            on_mismatch({"state": "awaiting_human_correction",
                         "expected_window_title_contains": list(patterns),
                         "observed_title": first.title, "timeout_s": correction_s})
        except Exception:
            logger.exception("the human-correction notice failed; waiting anyway")
    logger.warning("verify_screen guard KO: expected a window title containing {}, current "
                   "{!r}; waiting up to {:.0f} s for the person at the workstation to bring "
                   "it up (human-correction mode)", list(patterns), first.title, correction_s)
    fixed = wait_for_title(patterns, read_title, correction_s, clock, sleep)
    correction: dict[str, Any] = {
        "kind": "window_title", "expected_window_title_contains": list(patterns),
        "observed_title": first.title, "corrected_title": fixed.title,
        "waited_s": round(fixed.waited_s, 3),
    }
    if fixed.matched:
        logger.info("verify_screen guard corrected by the user: now {!r}", fixed.title)
        return ActionOutcome(success=True, warning=GUARD_MISMATCH, correction=correction)
    return ActionOutcome.failure(
        TITLE_MISMATCH, warning=GUARD_MISMATCH, needs_human=True, correction=None,
        target_description=f"expected a window title containing {list(patterns)}, got "
                           f"{fixed.title!r} (nobody brought it up within {correction_s:.0f}"
                           " s)")
