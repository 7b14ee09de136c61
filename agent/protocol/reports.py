"""Reports: what the agent says of an attempt, a re-delivery or an action a restart cut.

They travel through the agent's retrying outbox (agent/protocol/outbox.py) until acknowledged.
"""

from __future__ import annotations

from agent.executors.base import ActionOutcome
from agent.protocol.ledger import LedgerEntry
from messages.dispatch import ActionReport, DispatchAction

ALREADY_EXECUTED = "already_executed"
INDETERMINATE = "indeterminate_after_restart"


def build_report(dispatch: DispatchAction, outcome: ActionOutcome,
                 executed_at: float | None = None) -> ActionReport:
    """The report of one attempt, addressed from the dispatch it answers."""
    return ActionReport(
        replay_id=dispatch.replay_id, session_id=dispatch.session_id,
        machine_id=dispatch.machine_id, action_id=dispatch.action.action_id,
        attempt_id=dispatch.attempt_id, executed_at=executed_at, **outcome.report_fields())


def indeterminate_report(entry: LedgerEntry) -> ActionReport:
    """For an action found started but unfinished after a restart: we cannot know whether
    its input happened, so we say so and ask for a person instead of guessing."""
    outcome = ActionOutcome.failure(
        INDETERMINATE, needs_human=True, input_performed="unknown",
        target_description=(f"the agent restarted while executing this {entry.action_type} "
                            "action: check the screen before resuming"))
    return ActionReport(
        replay_id=entry.replay_id, session_id=entry.session_id, machine_id=entry.machine_id,
        action_id=entry.action_id, attempt_id=entry.attempt_id, **outcome.report_fields())


def readdress(report: ActionReport, dispatch: DispatchAction) -> ActionReport:
    """``report`` answering a re-delivery ``dispatch`` of the same action, i.e. the same
    ``action_id`` in the same replay (cases g, k), or of another action id of the same step
    (a resume superseding it, or a stale copy of a superseded id).

    It keeps the original outcome and gets warning ``already_executed``, except an
    indeterminate one: claiming it executed would be a guess.
    """
    if (dispatch.attempt_id, dispatch.action.action_id) == (report.attempt_id,
                                                            report.action_id):
        return report  # the very attempt it answers: a transport duplicate
    warning = report.warning if report.error == INDETERMINATE else ALREADY_EXECUTED
    return report.model_copy(update={
        "action_id": dispatch.action.action_id, "attempt_id": dispatch.attempt_id,
        "replay_id": dispatch.replay_id, "session_id": dispatch.session_id,
        "machine_id": dispatch.machine_id, "warning": warning,
    })
