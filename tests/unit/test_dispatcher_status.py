"""What ``replay status`` (and the console, from it) says of a replay, from the dispatcher
core's state."""

from __future__ import annotations

from actors.dispatcher.machine.state import DispatcherConfig
from console.views import pause_view
from messages.monitor import MonitorResolution
from tests.unit.test_dispatcher_consult import answer, routing
from tests.unit.test_dispatcher_core import H, act, wf

SCREEN1 = MonitorResolution(idx=0, offset_x=0, offset_y=0, w=1920, h=1080, source="action")


def _i1(h: H, rid: str) -> tuple[int, int, int]:
    """(queued, in flight, steps left), as tests/integration/invariants.py reads them."""
    s = h.status(rid)
    return s.queue_length, 1 if s.current_action_id is not None else 0, s.total - s.index


def test_a_retry_waiting_for_its_monitor_is_still_a_step_to_go() -> None:
    """Between a failed report and the retry's dispatch, while the monitor router is asked
    where the retry goes (a replay stored while it waited for the router), the retry is
    neither queued nor in flight in the core: the status counts it as waiting to be
    dispatched, at the head (I1: queued + in flight = left)."""
    h = H(DispatcherConfig(agent_routes=True))
    rid, _ = h.start(wf("s1", act("s2", "wait")))
    h.report(rid, success=False, error="target_not_found")
    routing(h, rid)
    s = h.status(rid)
    assert (s.status, s.current_action_state) == ("running", "awaiting_route")
    assert h.replay(rid).awaiting.action.action_id == "s1_retry1"  # type: ignore[union-attr]
    assert _i1(h, rid) == (2, 0, 2)
    assert s.queue_head == ["s1_retry1", "s2"]
    answer(h, rid, SCREEN1)
    assert _i1(h, rid) == (1, 1, 2) and h.status(rid).queue_head == ["s2"]


def test_the_last_step_waiting_for_its_monitor_is_counted() -> None:
    h = H(DispatcherConfig(agent_routes=True))
    rid, _ = h.start(wf("s1"))
    routing(h, rid)
    assert _i1(h, rid) == (1, 0, 1) and h.status(rid).queue_head == ["s1"]


def test_a_pause_names_its_step_and_that_steps_intention() -> None:
    h = H()
    rid, _ = h.start(wf("s1", act("p1", "pause_for_human")))
    h.report(rid)
    s = h.status(rid)
    assert (s.status, s.pause_action_id, s.pause_intention) == (
        "paused_need_help", "p1", "étape p1")
    body = s.model_dump(mode="json")
    assert (body["pause_action_id"], body["pause_intention"]) == ("p1", "étape p1")


def test_a_failed_retry_names_the_retry_and_its_steps_intention() -> None:
    h = H(DispatcherConfig(max_retries_per_action=1))
    rid, _ = h.start(wf("s1", "s2"))
    h.report(rid, success=False, error="target_not_found")
    h.report(rid, success=False, error="target_not_found")
    s = h.status(rid)
    assert (s.pause_action_id, s.pause_intention) == ("s1_retry1", "étape s1")


def test_without_a_pause_step_the_fields_are_not_sent() -> None:
    """An older peer (models forbid extra keys) still reads the status."""
    h = H()
    rid, _ = h.start(wf("s1"))
    body = h.status(rid).model_dump(mode="json")
    assert "pause_action_id" not in body and "pause_intention" not in body


def test_the_consoles_pause_dialog_names_the_step_before_the_trail_catches_up() -> None:
    h = H()
    rid, _ = h.start(wf(act("p1", "pause_for_human")))
    view = pause_view(h.status(rid), [])  # no replay_paused record yet
    assert view is not None and view.detail_pending
    assert (view.action_id, view.intention) == ("p1", "étape p1")


def test_the_status_names_the_workflow_and_the_intention_of_the_step_for_people() -> None:
    h = H()
    named = wf("s1", act("p1", "pause_for_human")).model_copy(update={"name": "Note"})
    rid, _ = h.start(named)
    s = h.status(rid)
    assert (s.workflow_name, s.current_action_id, s.current_intention) == (
        "Note", "s1", "étape s1")
    h.report(rid)
    s = h.status(rid)
    assert (s.status, s.current_intention) == ("paused_need_help", "étape p1")
    rid, _ = h.start(wf("s1"))
    assert "workflow_name" not in h.status(rid).model_dump(mode="json")
