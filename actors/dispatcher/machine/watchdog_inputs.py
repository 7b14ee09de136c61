"""What the watchdog asks the dispatcher: the actions in flight, resend an orphan, give it up.

Plain functions of the decision's :class:`~actors.dispatcher.machine.book.Tx` (same pure rules:
one input and the time in, a Decision out); :class:`~actors.dispatcher.core.DispatcherCore`
calls them.
"""

from __future__ import annotations

from actors.dispatcher.machine import rules, steps
from actors.dispatcher.machine.book import ReplayBook, Tx, who
from actors.dispatcher.machine.decision import Decision
from actors.dispatcher.machine.state import Resolution
from messages import events
from messages.dispatch import InFlightList, OrphanGiveUp, OrphanResend
from messages.replay import Ack


def inflight(book: ReplayBook) -> Decision:
    """Every action in flight, for the watchdog rebuilding its timers."""
    entries = [r.tracked() for r in sorted(book.replays.values(), key=lambda r: r.seq)
               if r.inflight is not None]
    return Decision(InFlightList(entries=entries))


def orphan_resend(tx: Tx, msg: OrphanResend) -> Decision:
    """Resend an orphan, if that attempt is still the current one (I5).

    Always at the head: ``position="tail"`` would run later steps of the session before
    this one, breaking "one action in flight per session, in order"; it is reported as
    ``requested_position`` and not applied.
    """
    r = tx.book.current(msg.action_id, msg.attempt_id)
    if r is None or r.inflight is None:
        return tx.done(_skipped(msg.action_id, msg.attempt_id))
    steps.redispatch(tx, r, "orphan_timeout", orphan=True)
    e = r.inflight
    tx.event(events.DISPATCH_ORPHAN_RESENT, **who(r, msg.action_id),
             attempt_id=e.attempt_id, previous_attempt_id=msg.attempt_id,
             resent=e.orphan_resends, age_s=msg.age_s, position="head",
             requested_position=msg.position)
    return tx.done(Ack(status="resent", detail={
        "attempt_id": e.attempt_id, "resent_count": e.orphan_resends, "position": "head"}))


def orphan_giveup(tx: Tx, msg: OrphanGiveUp) -> Decision:
    """Abandon an orphan (I5 re-check); D2 and the dead-client hook decide what follows."""
    r = tx.book.current(msg.action_id, msg.attempt_id)
    if r is None or r.inflight is None:
        return tx.done(_skipped(msg.action_id, msg.attempt_id))
    action = r.inflight.action
    # Never claimed: the agent did not start it under any attempt since our start (it
    # may only have run if claimed before a restart of ours); people see which.
    claimed = r.inflight.claimed
    steps.untrack(tx, r)
    r.resolved[action.action_id] = Resolution("abandoned", msg.attempt_id)
    r.supersedes.pop(action.action_id, None)
    r.bump("abandoned")
    period = tx.config.dead_client_period_s
    now = tx.now
    r.giveup_times = [t for t in r.giveup_times if now - t <= period] + [now]
    tx.touch(r)
    pauses = rules.giveup_pauses(action)
    info = {**who(r, action.action_id), "attempt_id": msg.attempt_id,
            "action_type": action.type, "critical": action.critical, "pauses": pauses,
            "resent_count": msg.resent_count, "age_s": msg.age_s, "claimed": claimed}
    tx.event(events.DISPATCH_ORPHAN_GIVEUP, **info)
    tx.audit("action_given_up", **info)
    dead = sum(1 for o in tx.book.replays.values() if o.session_id == r.session_id
               for t in o.giveup_times if now - t <= period)
    if dead >= tx.config.dead_client_count:
        tx.event(events.DEAD_CLIENT_SIGNAL, session_id=r.session_id, dead_count=dead,
                 period_s=period, replay_id=r.replay_id, machine_id=r.machine_id)
        steps.pause(tx, r, rules.dead_client_pause(r.machine_id, dead, period), action,
                    failed=action)
    elif pauses:
        steps.pause(tx, r, rules.orphan_pause(r.shown(action)), action, failed=action)
    else:
        r.index += 1  # a lost wait is logged and the replay goes on
        steps.advance(tx, r)
    return tx.done(Ack(status="abandoned", detail={
        "replay_status": r.status, "dead_count": dead}))


def _skipped(action_id: str, attempt_id: str) -> Ack:
    return Ack(status="skipped", detail={"reason": "not_in_flight", "action_id": action_id,
                                         "attempt_id": attempt_id})
