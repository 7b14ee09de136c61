"""What an agent tells the dispatcher: reports, claims, progress, hello.

Plain functions of the decision's :class:`~actors.dispatcher.machine.book.Tx` (one input and the
time in, a Decision out); :class:`~actors.dispatcher.core.DispatcherCore` calls them. A report
is followed here from its arrival (:func:`report`) to its effect on the replay
(:func:`apply_report`): done, retried, or paused for a person.
"""

from __future__ import annotations

from actors.dispatcher.machine import consult, consult_inputs, rules, steps
from actors.dispatcher.machine.book import ReplayBook, Tx, who
from actors.dispatcher.machine.consult_inputs import CLAIM_RETRY_S, VERDICT_PENDING
from actors.dispatcher.machine.decision import Decision, RecordReport, TrackInFlight
from actors.dispatcher.machine.state import PAUSED, InFlightEntry, ReplayState, Resolution
from messages import events
from messages.control import ErrorReply
from messages.dispatch import (
    ActionProgress,
    ActionReport,
    AgentHello,
    ClaimAttempt,
    ClaimReply,
    ReportAck,
)
from messages.outputs import read_text_spec
from messages.replay import Ack
from workflow.inputs import mask_model
from workflow.outputs import OUTPUT_INVALID, clean, value_problem

RESEND_DUE = "resend_due"
"""A claim refused because the watchdog is about to resend its attempt: the copy it sends
is claimed instead."""
GRANT_MARGIN_S = 0.5
"""Taken off a grant's time: the wall clock the watchdog's age is counted on may step."""


def report(tx: Tx, msg: ActionReport, sender_machine: str) -> Decision:
    """Apply the first current report of an action (I3); record every other one."""
    r = tx.book.replays.get(msg.replay_id)
    read = msg.output_value  # what a read_text step read, before any masking
    if r is not None:
        # What the agent read or looked for may hold a sensitive value: masked before the
        # report is recorded, audited or shown (docs/protocol.md, "Inputs", "Outputs").
        msg = mask_model(msg, _hidden(r, msg))
    entry = r.inflight if r is not None else None
    if entry is not None and entry.action.action_id != msg.action_id:
        entry = None
    done = r.resolved.get(msg.action_id) if r is not None else None
    expected = entry.machine_id if entry is not None else (
        r.machine_id if r is not None and done is not None else None)
    if sender_machine != msg.machine_id or (expected is not None and (
            sender_machine != expected or msg.machine_id != expected)):
        # Only the worker the action was sent to may report it, and no agent for another
        # (an authenticated sender is not the body's machine_id; docs/protocol.md).
        tx.effects.append(RecordReport(msg, "refused", sender_machine, tx.now))
        tx.audit("report_refused", replay_id=msg.replay_id, action_id=msg.action_id,
                 attempt_id=msg.attempt_id, sender_machine=sender_machine,
                 claimed_machine=msg.machine_id, expected_machine=expected)
        return tx.done(ErrorReply(code="wrong_machine", message=(
            f"action {msg.action_id} was not dispatched to {sender_machine}"),
            detail={"action_id": msg.action_id, "attempt_id": msg.attempt_id}))
    if r is not None and entry is not None:
        status = "accepted" if entry.attempt_id == msg.attempt_id else "stale"
    elif done is not None:
        status = "duplicate" if done.outcome == "acked" else "stale"
    else:
        status = "unknown"  # cancelled replay's action (case m), precheck ids (case q)
    dumped = msg.model_dump(mode="python")  # once: for the trail and the reports log
    tx.effects.append(RecordReport(msg, status, sender_machine, tx.now, dumped))
    tx.audit("report_received", status=status, sender_machine=sender_machine, report=dumped)
    if r is not None and entry is not None and status == "accepted":
        _routed(tx, r, msg)
        apply_report(tx, r, entry, _judged_read(tx, r, entry, msg, read))
    return tx.done(ReportAck(action_id=msg.action_id, attempt_id=msg.attempt_id,
                             status=status))


def _routed(tx: Tx, r: ReplayState, msg: ActionReport) -> None:
    """The monitor an agent found itself (``DispatchAction.agent_routes``): the bus events
    the monitor router gives for its own answers (docs/screens-and-pauses.md)."""
    res = msg.monitor_resolution
    if res is None:
        return
    ids = {**who(r, msg.action_id), "by": "agent"}
    if res.reason == "invalid_index":
        tx.event(events.MONITOR_INVALID_INDEX, **ids)
    elif res.reason == "recorded_monitor_unavailable":
        tx.event(events.MONITOR_UNAVAILABLE, **ids, fallback=res.source)
    tx.event(events.MONITOR_ROUTED, **ids, **res.model_dump(mode="json"))


def _hidden(r: ReplayState, msg: ActionReport) -> list[str]:
    """What to mask in ``msg``: the run's sensitive values, and what a read_text step of a
    sensitive output read now (a stale report's too)."""
    hidden = r.secrets()
    if msg.output_value:
        spec = r.read_spec(msg.action_id)
        if spec is None or spec.sensitive:
            hidden = sorted({*hidden, msg.output_value.strip(), clean(msg.output_value)} - {""},
                            key=len, reverse=True)
    return hidden


def _judged_read(tx: Tx, r: ReplayState, entry: InFlightEntry, msg: ActionReport,
                 read: str | None) -> ActionReport:
    """A read_text step's report: the value kept as the run's output when it fits the step
    (judged again here, whatever the agent said), else the step fails ``output_invalid``
    and the replay pauses; nothing is kept from a wrong value (docs/protocol.md, "Outputs")."""
    action = entry.action
    if action.type != "read_text" or not msg.success:
        return msg
    spec = read_text_spec(action.parameters)
    problem = value_problem(spec, read)
    if problem is not None:
        return msg.model_copy(update={"success": False, "error": OUTPUT_INVALID,
                                      "needs_human": True, "target_description": problem})
    r.outputs[spec.output] = clean(read or "")
    info = {**who(r, action.action_id), "output": spec.output,
            "value": r.shown_outputs()[spec.output], "sensitive": spec.sensitive}
    tx.event(events.OUTPUT_READ, **info)
    tx.audit("output_read", **info)
    return msg


def apply_report(tx: Tx, r: ReplayState, entry: InFlightEntry, msg: ActionReport) -> None:
    """An accepted report: the step is done, paused on, or retried; then the next one."""
    action = entry.action
    steps.untrack(tx, r)
    r.resolved[action.action_id] = Resolution("acked", entry.attempt_id)
    r.supersedes.pop(action.action_id, None)
    r.bump("reports")
    if msg.warning == "already_executed":
        r.bump("already_executed")
    tx.touch(r)
    tx.event(events.ACTION_ACKED, **who(r, action.action_id), attempt_id=entry.attempt_id,
             success=msg.success, error=msg.error, warning=msg.warning)
    shown = r.shown(action)  # what pause messages name, the values masked if sensitive
    cause = rules.report_pause(msg, shown)
    if msg.success:
        # The step is done even if the report asks for a person: pause before the next
        # step, and do not re-execute this one on resume (no double click).
        r.completed_actions += 1
        r.index += 1
        if cause is not None:
            steps.pause(tx, r, cause, action)
    elif rules.input_state(msg, action) != "none":
        # Failed after its input went out, or maybe: redoing it (a retry, or a resume)
        # could input twice. A person looks; resuming goes on with the next step unless
        # they say it was not done (control_inputs.resume).
        steps.pause(tx, r, rules.input_pause(msg, shown), action, failed=action)
    elif cause is not None:
        steps.pause(tx, r, cause, action, failed=action)
    else:
        base = rules.base_id(action.action_id)
        used = r.retry_budget.get(base, 0)
        if used < tx.config.max_retries_per_action:
            n = r.retries[base] = r.retries.get(base, 0) + 1
            r.retry_budget[base] = used + 1
            retry = action.model_copy(update={"action_id": rules.retry_id(base, n)})
            r.inserted.insert(0, retry)
            r.bump("retries")
            tx.audit("retry_scheduled", **who(r, action.action_id),
                     retry_action_id=retry.action_id, error=msg.error, budget_used=used + 1)
        else:
            steps.pause(tx, r, rules.retries_exhausted(msg, shown, used), action,
                        failed=action)
    consult.keep_screenshot(r, entry, msg)
    if tx.config.loop_detector and r.status == "running" and r.queue_len():
        consult_inputs.observe(tx, r, entry, msg)  # the verdict is pipelined
    steps.advance(tx, r)


def claim(book: ReplayBook, msg: ClaimAttempt, sender_machine: str, now: float) -> Decision:
    """May the agent perform this attempt now? Only if it is the one in flight.

    Asked by the agent before any input (agent/protocol/serve.py): a copy that stayed in a frozen
    agent's socket while the watchdog resent or gave up, or the replay was cancelled or
    paused, is refused and never runs. Not stored: after a restart of ours every action
    in flight is re-sent under a new attempt, and the old one is refused.

    A grant is good for as long as the watchdog will still wait for this attempt
    (:func:`grant_valid_s`): a grant that itself waited in a frozen agent's socket past
    that, while the watchdog resent or gave up the step, is not acted on (docs/protocol.md,
    "Writing an agent").
    """
    r = book.current(msg.action_id, msg.attempt_id)
    if r is None or r.inflight is None or r.replay_id != msg.replay_id:
        return Decision(ClaimReply(granted=False, reason="not_current"))
    if sender_machine != r.inflight.machine_id or msg.machine_id != r.inflight.machine_id:
        return Decision(ClaimReply(granted=False, reason="wrong_machine"))
    if r.status != "running":
        # Paused since: no input after a pause (the pause withdraws an unclaimed input,
        # steps.withdraw; this holds for one re-sent to a paused replay after a restart).
        return Decision(ClaimReply(granted=False, reason="paused"))
    if consult_inputs.claim_waits(r):
        return Decision(ClaimReply(granted=False, reason=VERDICT_PENDING,
                                   retry_in_s=CLAIM_RETRY_S))
    valid_s = grant_valid_s(r.inflight, book.config.orphan_timeout_s, now)
    if valid_s is not None and valid_s <= 0:
        return Decision(ClaimReply(granted=False, reason=RESEND_DUE))
    r.inflight.claimed = True
    return Decision(ClaimReply(granted=True, valid_s=valid_s))


def grant_valid_s(e: InFlightEntry, orphan_timeout_s: float | None, now: float) -> float | None:
    """How long after the agent asked its claim the input may still start: the watchdog's
    patience for the attempt left now, less a margin; None without a watchdog.

    The watchdog starts timing an attempt after it was dispatched (``dispatched_at``) and
    asks the dispatcher to resend or give it up only past ``orphan_timeout_s`` plus the
    patience the agent asked for; the agent counts from the moment it asked, which is
    before this grant: both ends err toward refusing.
    """
    if orphan_timeout_s is None:
        return None
    return orphan_timeout_s + e.patience_s - (now - e.dispatched_at) - GRANT_MARGIN_S


def progress(tx: Tx, msg: ActionProgress, sender_machine: str) -> Decision:
    """The agent says the attempt in flight is still under way, and for how long."""
    r = tx.book.current(msg.action_id, msg.attempt_id)
    e = r.inflight if r is not None else None
    if r is None or e is None or r.replay_id != msg.replay_id:
        return Decision(Ack(status="stale"))
    if sender_machine != e.machine_id or msg.machine_id != e.machine_id:
        return Decision(ErrorReply(code="wrong_machine", message=(
            f"action {msg.action_id} was not dispatched to {sender_machine}")))
    e.progress, e.patience_s = msg.state, msg.hold_s
    tx.effects.append(TrackInFlight(r.tracked()))  # the watchdog's clock starts again
    info = {**who(r, msg.action_id), "attempt_id": msg.attempt_id, "state": msg.state,
            "hold_s": msg.hold_s, "detail": msg.detail}
    tx.event(events.ACTION_PROGRESS, **info)
    tx.audit("action_progress", **info)
    return tx.done(Ack(status="noted"))


def agent_hello(tx: Tx, msg: AgentHello, underway: frozenset[str] = frozenset()) -> Decision:
    """An agent (re)connected: resend what it should be doing, show pauses again.

    Not resent: the attempts the hello says the agent holds, and ``underway``, those the
    shell knows to be in this agent process's hands or still on their way to it (a
    dispatch the broker queued before the agent was there: actors/dispatcher/process.py).
    """
    resent: list[str] = []
    held = set(msg.holding) | underway
    kept: list[str] = []
    for r in tx.book.active():
        if r.inflight is not None and r.inflight.machine_id == msg.machine_id:
            if r.inflight.attempt_id in held:  # it has it: its report will come
                kept.append(r.inflight.action.action_id)
                continue
            resent.append(r.inflight.action.action_id)
            steps.redispatch(tx, r, "agent_reconnected", orphan=False)
        elif r.machine_id == msg.machine_id and r.status == "running":
            steps.advance(tx, r)
        if r.machine_id == msg.machine_id and r.status == PAUSED:
            steps.notify_paused(tx, r)
    tx.audit("agent_hello", machine_id=msg.machine_id, instance_id=msg.instance_id,
             pid=msg.pid, resent=resent, kept=kept)
    return tx.done(Ack(detail={"resent": resent, "kept": kept}))
