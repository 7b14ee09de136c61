"""The history checker: what no test may break, checked on the history of every
integration test that ran a tree (one checker, every history, as Jepsen's checkers).

A history is the audit trail's records (what the dispatcher decided) and the agents' effects
logs (one line per input an executor performed, written right after it: agent/effects.py).
Checked per replay (docs/architecture.md, "Every test's history is checked"):

``double_input``
    No action's input performed twice (one line per action id), and no second input of a
    workflow step (its base id: ``_retryN`` / ``_resumeN`` removed) unless a person resumed
    the replay between the two (a ``replay_resumed`` record).
``input_after_stop``
    No input after a ``replay_cancelled`` or ``replay_paused`` record (until the resume that
    ends the pause), except of the action in flight at that record: dispatched before it,
    not yet accepted (a pause does not cancel it; a given-up attempt may still be running).
``not_exactly_once``
    A completed replay performed each input step once, except that each resume which redid
    the step (``resume_action_id``) allows one more (the person judged the screen), and a
    non-critical step the watchdog gave up (a scroll: the replay goes on) may have none.
    Steps a person takes over are the ``pause_for_human`` ones (``counts_step``): they are
    not input steps. And no step is left out: as many steps ran as the replay's ``total``.
``input_after_failed_guard``
    No input dispatched after a ``verify_screen`` step's accepted report said it failed,
    until the guard passes (its retry or resume accepted as a success) or a person resumes.
``item_input_twice``
    Per work item (docs/queues.md; its replays are those whose ``replay_started`` names its
    queue and reference): no step's input performed in two of its replays, unless a person
    retried the item between the two (a ``queue_item_changed`` record to ``new`` with an
    ``operator``). A new attempt the queue makes by itself comes only after a replay that
    performed no input.

Order. Records are in ``seq`` order, which for one dispatcher is the order of its decisions
(its records leave its outbox in order: audit_outbox/sender.py). An input is placed against
a record by facts first: it comes after its attempt's dispatch record, and before any report
of its attempt (the agent writes its line before it builds the report). Only when the facts
leave it open (the attempt dispatched before the record, and reported after it or never) are
clocks compared: the record's ``at`` (the dispatcher's ``time.time()`` when it decided)
against the line's ``at`` (the agent's ``time.time()`` right after the input). That is sound
in the tests only: every process reads the same machine clock, which nothing steps while a
test runs; ``input_after_failed_guard`` never needs it (an input follows a guard only through
a later dispatch).

A trail is read while it may still be behind the decisions (the outbox not yet sent): an
input whose dispatch record is not in the trail is not judged (:attr:`Verdict.unjudged`).
Every decision before that dispatch is then missing too, and nothing judged can depend on a
missing record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, Literal

from actors.dispatcher.machine.rules import base_id
from messages.workflow import INPUT_TYPES

DOUBLE_INPUT = "double_input"
INPUT_AFTER_STOP = "input_after_stop"
NOT_EXACTLY_ONCE = "not_exactly_once"
INPUT_AFTER_FAILED_GUARD = "input_after_failed_guard"
ITEM_INPUT_TWICE = "item_input_twice"
PROPERTIES = (DOUBLE_INPUT, INPUT_AFTER_STOP, NOT_EXACTLY_ONCE, INPUT_AFTER_FAILED_GUARD,
              ITEM_INPUT_TWICE)
DISPATCHES = ("action_dispatched", "action_resent")


def clock(at: float) -> str:
    """``HH:MM:SS.mmm`` UTC, as the accounts show times."""
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S.%f")[:-3]


@dataclass(frozen=True)
class Record:
    """One audit record, as far as the checker reads it."""

    seq: int
    kind: str
    replay_id: str | None
    at: float
    data: Mapping[str, Any]

    def describe(self) -> str:
        return f"record {self.seq} {self.kind} at {clock(self.at)}"


@dataclass(frozen=True)
class Effect:
    """One effects-log line; ``where`` is ``file:line``. ``replay_id`` is None in a line
    written before the field existed."""

    action_id: str
    attempt_id: str
    at: float
    replay_id: str | None = None
    where: str = ""

    def describe(self) -> str:
        return (f"{self.where} ({self.action_id}, attempt {self.attempt_id}, "
                f"at {clock(self.at)})")

    @classmethod
    def of(cls, line: Mapping[str, Any], where: str = "") -> Effect:
        rid = line.get("replay_id")
        return cls(str(line["action_id"]), str(line["attempt_id"]), float(line["at"]),
                   rid if isinstance(rid, str) else None, where)


@dataclass(frozen=True)
class Finding:
    """A property broken: which, in which replay, at which step, and the evidence."""

    prop: str
    replay_id: str
    step: str
    account: str

    def __str__(self) -> str:
        return f"{self.prop}: replay {self.replay_id}, step {self.step}: {self.account}"


@dataclass
class Verdict:
    findings: list[Finding] = field(default_factory=list)
    unjudged: list[Effect] = field(default_factory=list)
    """Inputs whose dispatch record is in no trail read (not judged)."""
    replays: int = 0
    inputs: int = 0

    def broken(self) -> set[str]:
        return {f.prop for f in self.findings}


def _report(r: Record) -> Mapping[str, Any]:
    report = r.data.get("report")
    return report if isinstance(report, Mapping) else {}


class Replay:
    """One replay's records (in trail order) and inputs, and the facts read from them."""

    def __init__(self, replay_id: str, records: Iterable[Record],
                 effects: Iterable[Effect] = ()) -> None:
        self.id = replay_id
        self.records = sorted(records, key=lambda r: r.seq)
        self.effects = sorted(effects, key=lambda e: e.at)
        self.dispatch: dict[str, Record] = {}  # attempt id -> its dispatch record
        self.reports: dict[str, list[Record]] = defaultdict(list)  # attempt id -> reports
        for r in self.records:
            if r.kind in DISPATCHES:
                self.dispatch.setdefault(str(r.data.get("attempt_id")), r)
            elif r.kind == "report_received":
                self.reports[str(_report(r).get("attempt_id"))].append(r)

    def of_kind(self, *kinds: str) -> list[Record]:
        return [r for r in self.records if r.kind in kinds]

    def after(self, record: Record, *kinds: str) -> Record | None:
        """The first record of ``kinds`` after ``record``."""
        return next((r for r in self.records if r.seq > record.seq and r.kind in kinds), None)

    def accepted(self, r: Record) -> bool:
        return r.kind == "report_received" and r.data.get("status") == "accepted"

    def action_type(self, attempt_id: str) -> str | None:
        d = self.dispatch.get(attempt_id)
        return None if d is None else d.data.get("action_type")

    def side(self, e: Effect, r: Record) -> Literal["before", "after"]:
        """Whether input ``e`` happened before or after the decision ``r`` (module doc)."""
        if any(x.seq < r.seq for x in self.reports.get(e.attempt_id, [])):
            return "before"  # its report was in before r: so was the input
        d = self.dispatch.get(e.attempt_id)
        if d is not None and d.seq > r.seq:
            return "after"  # dispatched after r
        return "before" if e.at < r.at else "after"

    def open_at(self, stop: Record) -> set[str]:
        """Action ids dispatched before ``stop`` and not accepted before it: in flight."""
        done = {str(_report(r).get("action_id")) for r in self.records
                if r.seq < stop.seq and self.accepted(r)}
        return {str(d.data.get("action_id")) for d in self.dispatch.values()
                if d.seq < stop.seq} - done


def replays(records: Iterable[Record], effects: Iterable[Effect]
            ) -> tuple[list[Replay], list[Effect]]:
    """The trail's replays with their inputs, and the inputs no dispatch record explains."""
    by_replay: dict[str, list[Record]] = defaultdict(list)
    owner: dict[str, str] = {}  # attempt id -> replay id
    for r in records:
        if r.replay_id is not None:
            by_replay[r.replay_id].append(r)
            if r.kind in DISPATCHES:
                owner[str(r.data.get("attempt_id"))] = r.replay_id
    inputs: dict[str, list[Effect]] = defaultdict(list)
    unjudged: list[Effect] = []
    for e in effects:
        rid = owner.get(e.attempt_id)
        if rid is None or (e.replay_id is not None and e.replay_id != rid):
            unjudged.append(e)
        else:
            inputs[rid].append(e)
    return [Replay(rid, recs, inputs[rid]) for rid, recs in by_replay.items()], unjudged


def check(records: Iterable[Record], effects: Iterable[Effect],
          inputs_seen: bool = True) -> Verdict:
    """Every property on every replay of the history. ``inputs_seen`` False: no effects log
    of the test is known (an agent started outside the fixtures), so no input can be shown
    missing and ``not_exactly_once`` is not judged."""
    found, unjudged = replays(records, effects)
    verdict = Verdict(unjudged=unjudged, replays=len(found))
    rules = [double_inputs, inputs_after_stop, inputs_after_failed_guard]
    if inputs_seen:
        rules.append(not_exactly_once)
    for h in found:
        verdict.inputs += len(h.effects)
        for rule in rules:
            verdict.findings += rule(h)
    verdict.findings += items_input_twice(found)
    return verdict


def items_input_twice(found: list[Replay]) -> list[Finding]:
    """``item_input_twice`` (module doc)."""
    by_item: dict[tuple[str, str], list[Replay]] = defaultdict(list)
    for h in found:
        started = next(iter(h.of_kind("replay_started")), None)
        q = started.data.get("queue") if started is not None else None
        ref = started.data.get("reference") if started is not None else None
        if isinstance(q, str) and isinstance(ref, str):
            by_item[(q, ref)].append(h)
    out = []
    for (q, ref), hs in by_item.items():
        if len(hs) < 2:
            continue
        retried = [r.at for h in hs for r in h.of_kind("queue_item_changed")
                   if r.data.get("state") == "new" and r.data.get("operator")]
        by_step: dict[str, list[tuple[Replay, Effect]]] = defaultdict(list)
        for h in hs:
            for e in h.effects:
                by_step[base_id(e.action_id)].append((h, e))
        for step, lines in by_step.items():
            ordered = sorted(lines, key=lambda he: he[1].at)
            for (h1, first), (h2, second) in pairwise(ordered):
                if h1 is not h2 and not any(first.at < at < second.at for at in retried):
                    out.append(Finding(ITEM_INPUT_TWICE, h2.id, step, (
                        f"item {q}/{ref}: the step's input in replay {h1.id} "
                        f"({first.describe()}) and again in replay {h2.id} "
                        f"({second.describe()}) with no retry by a person between")))
    return out


def double_inputs(h: Replay) -> list[Finding]:
    """``double_input`` (module doc)."""
    out = []
    by_action: dict[str, list[Effect]] = defaultdict(list)
    for e in h.effects:
        by_action[e.action_id].append(e)
    for action_id, lines in by_action.items():
        if len(lines) > 1:
            out.append(Finding(DOUBLE_INPUT, h.id, base_id(action_id), (
                f"action {action_id} performed {len(lines)} times: "
                + "; ".join(e.describe() for e in lines))))
    by_step: dict[str, list[Effect]] = defaultdict(list)
    for lines in by_action.values():
        by_step[base_id(lines[0].action_id)].append(lines[0])
    resumes = h.of_kind("replay_resumed")
    for step, lines in by_step.items():
        for first, second in pairwise(sorted(lines, key=lambda e: e.at)):
            if not any(h.side(first, r) == "before" and h.side(second, r) == "after"
                       for r in resumes):
                out.append(Finding(DOUBLE_INPUT, h.id, step, (
                    f"a second input of the step with no resume between: "
                    f"{first.describe()}, then {second.describe()}")))
    return out


def inputs_after_stop(h: Replay) -> list[Finding]:
    """``input_after_stop`` (module doc)."""
    out = []
    for stop in h.of_kind("replay_paused", "replay_cancelled"):
        end = None if stop.kind == "replay_cancelled" else h.after(stop, "replay_resumed")
        in_flight = h.open_at(stop)
        for e in h.effects:
            if e.action_id in in_flight or h.side(e, stop) == "before":
                continue
            if end is None or h.side(e, end) == "before":
                until = "" if end is None else f", before {end.describe()}"
                flying = ", ".join(sorted(in_flight)) or "none"
                out.append(Finding(INPUT_AFTER_STOP, h.id, base_id(e.action_id), (
                    f"{e.describe()} after {stop.describe()}{until}; in flight at the "
                    f"{stop.kind.removeprefix('replay_')} record: {flying}")))
    return out


def not_exactly_once(h: Replay) -> list[Finding]:
    """``not_exactly_once`` (module doc), for a replay the trail shows completed."""
    done = next(iter(h.of_kind("replay_completed")), None)
    if done is None:
        return []
    out = []
    counts: dict[str, list[Effect]] = defaultdict(list)
    for e in h.effects:
        counts[base_id(e.action_id)].append(e)
    steps = {base_id(str(d.data.get("action_id"))): str(d.data.get("action_type"))
             for d in h.dispatch.values()}
    for step, kind in sorted(steps.items()):
        if kind not in INPUT_TYPES:
            continue
        redone = sum(1 for r in h.of_kind("replay_resumed")
                     if base_id(str(r.data.get("resume_action_id") or "")) == step
                     and r.data.get("resume_action_id"))
        let_go = any(base_id(str(g.data.get("action_id"))) == step and not g.data.get(
            "critical") for g in h.of_kind("action_given_up")) or step in done_by_person(h)
        lines = counts.get(step, [])
        low, high = (0 if let_go else 1), 1 + redone
        if not low <= len(lines) <= high:
            allowed = f"{low}" if low == high else f"{low} to {high}"
            out.append(Finding(NOT_EXACTLY_ONCE, h.id, step, (
                f"{kind} step performed {len(lines)} times ({allowed} allowed: {redone} "
                f"resumes redid it) in a replay completed at {done.describe()}"
                + (": " + "; ".join(e.describe() for e in lines) if lines else ""))))
    ran = set(steps) | {base_id(str(r.data.get("action_id"))) for r in h.records if (
        r.kind == "action_skipped" or (r.kind == "replay_paused" and r.data.get("reason")
                                       == "user_request" and r.data.get("action_id")))}
    started = next(iter(h.of_kind("replay_started")), None)
    total = started.data.get("total") if started is not None else None
    if isinstance(total, int) and len(ran) < total:
        out.append(Finding(NOT_EXACTLY_ONCE, h.id, "(all)", (
            f"completed ({done.describe()}) with {len(ran)} of its {total} steps run: "
            f"{', '.join(sorted(ran))}")))
    return out


def done_by_person(h: Replay) -> set[str]:
    """Steps a person said were done at a pause (a resume with ``step: done``): Léa may
    have performed them once, or the person did, by hand."""
    out: set[str] = set()
    for r in h.of_kind("replay_resumed"):
        if r.data.get("step") != "done":
            continue
        paused = [p for p in h.of_kind("replay_paused") if p.seq < r.seq]
        if paused and paused[-1].data.get("resume_action"):
            out.add(base_id(str(paused[-1].data["resume_action"])))
    return out


def inputs_after_failed_guard(h: Replay) -> list[Finding]:
    """``input_after_failed_guard`` (module doc)."""
    out = []
    for g in h.of_kind("report_received"):
        report = _report(g)
        if not h.accepted(g) or report.get("success") is not False or h.action_type(
                str(report.get("attempt_id"))) != "verify_screen":
            continue
        step = base_id(str(report.get("action_id")))
        release = next((r for r in h.records if r.seq > g.seq and (
            r.kind == "replay_resumed" or (h.accepted(r) and _report(r).get("success")
                                           and base_id(str(_report(r).get("action_id")))
                                           == step))), None)
        for e in h.effects:
            d = h.dispatch[e.attempt_id]
            if d.seq > g.seq and (release is None or d.seq < release.seq):
                out.append(Finding(INPUT_AFTER_FAILED_GUARD, h.id, base_id(e.action_id), (
                    f"{e.describe()}, dispatched by {d.describe()} after the guard {step} "
                    f"failed ({g.describe()}: {report.get('error')}) and before "
                    + ("anything released it" if release is None
                       else release.describe()))))
    return out


def account(verdict: Verdict, limit: int = 20) -> str:
    """The findings, readable, at most ``limit`` of them."""
    lines = [f"the history breaks {', '.join(sorted(verdict.broken()))} "
             f"({verdict.replays} replays, {verdict.inputs} inputs checked):"]
    lines += [f"  {f}" for f in verdict.findings[:limit]]
    if len(verdict.findings) > limit:
        lines.append(f"  ... and {len(verdict.findings) - limit} more")
    return "\n".join(lines)


def judged(verdict: Verdict, expected: set[str]) -> str | None:
    """Why a test fails on its history, or None: it broke a property it did not say it
    breaks (``expected``: its ``history_breaks`` marker), or kept one it said it breaks."""
    broken = verdict.broken()
    if broken - expected:
        unexpected = Verdict([f for f in verdict.findings if f.prop not in expected],
                             verdict.unjudged, verdict.replays, verdict.inputs)
        return account(unexpected)
    if expected - broken:
        return (f"marked history_breaks({', '.join(sorted(expected - broken))}), but the "
                f"history keeps it ({verdict.replays} replays, {verdict.inputs} inputs)")
    return None
