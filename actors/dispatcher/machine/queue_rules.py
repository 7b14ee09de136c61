"""The work item's state machine, as pure decisions (docs/queues.md, "An item's life").

No state is kept here: each function takes what it needs and says what follows. The
dispatcher's queue handlers (queue_inputs.py) apply the answers.

- An item is taken by the next free, healthy agent of its queue's pool, by priority, then
  deadline, then age (:func:`order_key`).
- The replay of an item pauses for a reason:
  - a *business* reason (the record or the screen is not what the procedure expects: target
    not found, a screen check failed...): ``business_failure``, the replay ends, never
    retried by itself;
  - another patient's identifier on the screen (``identity_mismatch``): ``needs_person``,
    the replay stays paused on that workstation, before any further input;
  - a *system* reason (the workstation or the link failed) before the item's first input:
    the replay ends and the item is tried again on any agent of the pool, up to the queue's
    ``max_attempts``, then ``failed``;
  - a system reason after an input may have gone out, or a pause at an input that failed or
    may have run: ``needs_person``, the replay stays paused with what was done (the same
    rule as an indeterminate step: never re-run from the start automatically);
  - any other pause (the procedure's own pause for a person, an operator's pause): the item
    stays ``in_progress``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from actors.dispatcher.machine import rules
from messages.loop import LOOP_DETECTED
from messages.queue import ItemStateName, Priority, QueueCommandName
from workflow.identity import IDENTITY_MISMATCH

TAKEABLE: frozenset[str] = frozenset({"new", "system_failure"})
"""States an agent may take an item in (``system_failure``: waiting for its next attempt)."""
FINAL: frozenset[str] = frozenset({"done", "cancelled", "skipped", "failed"})
BUSINESS_REASONS: frozenset[str] = frozenset(
    {
        rules.TARGET_NOT_FOUND,
        rules.AMBIGUOUS_TARGET,
        rules.WRONG_WINDOW,
        rules.ACTION_FAILED,
    }
)
PERSON_REASONS: frozenset[str] = frozenset({*rules.INPUT_REASONS, IDENTITY_MISMATCH})
"""Pauses that keep the replay and its workstation for a person, whatever came before: an
input that failed or may have run; another patient's record on the screen (it stays in
front of the person who must see it, docs/queues.md)."""
SYSTEM_REASONS: frozenset[str] = frozenset(
    {
        rules.ORPHAN_MAX_RESENDS,
        rules.DEAD_CLIENT,
        rules.GUARD_LOST,
        rules.SYSTEM_DIALOG,
        rules.NEEDS_HUMAN,
        LOOP_DETECTED,
    }
)
PRIORITY_RANK: dict[Priority, int] = {"high": 0, "normal": 1, "low": 2}

# Who may do what to an item, from which states (docs/queues.md, "Commands").
COMMAND_FROM: dict[QueueCommandName, frozenset[str]] = {
    "retry": frozenset(
        {"business_failure", "system_failure", "needs_person", "failed", "cancelled"}
    ),
    "skip": frozenset({"new", "system_failure", "business_failure", "needs_person", "failed"}),
    "cancel": frozenset(
        {"new", "system_failure", "in_progress", "business_failure", "needs_person"}
    ),
}
COMMAND_TO: dict[QueueCommandName, ItemStateName] = {
    "retry": "new",
    "skip": "skipped",
    "cancel": "cancelled",
}


@dataclass(frozen=True, slots=True)
class PauseVerdict:
    """What an item's replay pausing means for the item."""

    state: ItemStateName
    end_replay: bool  # end the paused replay (the agent is free for the next item)
    counts_attempt: bool = False  # a system failure before any input: one attempt used


def order_key(priority: Priority, deadline: float | None, seq: int) -> tuple[int, float, int]:
    """Which item is taken first: higher priority, then the earlier deadline (none: last),
    then the older item."""
    return (PRIORITY_RANK[priority], deadline if deadline is not None else float("inf"), seq)


def on_pause(
    reason: str, input_started: bool, attempts: int, max_attempts: int
) -> PauseVerdict | None:
    """The item's next state when its replay pauses for ``reason`` (None: the pause is part
    of the procedure and the item stays in progress). ``attempts``: the attempts made,
    this one included."""
    if reason in PERSON_REASONS:
        return PauseVerdict("needs_person", end_replay=False)
    if reason in BUSINESS_REASONS:
        return PauseVerdict("business_failure", end_replay=True)
    if reason in SYSTEM_REASONS:
        if input_started:
            return PauseVerdict("needs_person", end_replay=False)
        state: ItemStateName = "system_failure" if attempts < max_attempts else "failed"
        return PauseVerdict(state, end_replay=True, counts_attempt=True)
    return None


def on_resume() -> ItemStateName:
    """A person resumed the item's paused replay: it is in progress again."""
    return "in_progress"


def on_replay_end(status: Literal["completed", "failed", "cancelled"]) -> ItemStateName:
    """The item's replay ended by itself (completed) or by a person (``replay cancel``)."""
    return _END[status]


_END: dict[str, ItemStateName] = {"completed": "done", "failed": "failed", "cancelled": "cancelled"}


def command(current: str, name: QueueCommandName) -> ItemStateName | None:
    """The state a person's command leads to, or None when it does not apply to
    ``current``."""
    return COMMAND_TO[name] if current in COMMAND_FROM[name] else None
