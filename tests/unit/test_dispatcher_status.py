"""What ``replay status`` says of a replay, from the dispatcher core's state."""

from __future__ import annotations

from actors.dispatcher.state import DispatcherConfig
from messages.monitor import MonitorResolution
from tests.unit.test_dispatcher_consult import answer
from tests.unit.test_dispatcher_core import H, act, wf

SCREEN1 = MonitorResolution(idx=0, offset_x=0, offset_y=0, w=1920, h=1080, source="action")


def _i1(h: H, rid: str) -> tuple[int, int, int]:
    """(queued, in flight, steps left), as tests/integration/invariants.py reads them."""
    s = h.status(rid)
    return s.queue_length, 1 if s.current_action_id is not None else 0, s.total - s.index


def test_a_retry_waiting_for_its_monitor_is_still_a_step_to_go() -> None:
    """Between a failed report and the retry's dispatch, while the monitor router is asked
    where the retry goes, the retry is neither queued nor in flight in the core: the status
    counts it as waiting to be dispatched, at the head (I1: queued + in flight = left)."""
    h = H(DispatcherConfig(monitor_router=True))
    rid, _ = h.start(wf("s1", act("s2", "wait")))
    answer(h, rid, SCREEN1)
    h.report(rid, success=False, error="target_not_found")
    s = h.status(rid)
    assert (s.status, s.current_action_state) == ("running", "awaiting_route")
    assert h.replay(rid).awaiting.action.action_id == "s1_retry1"  # type: ignore[union-attr]
    assert _i1(h, rid) == (2, 0, 2)
    assert s.queue_head == ["s1_retry1", "s2"]
    answer(h, rid, SCREEN1)
    assert _i1(h, rid) == (1, 1, 2) and h.status(rid).queue_head == ["s2"]


def test_the_last_step_waiting_for_its_monitor_is_counted() -> None:
    h = H(DispatcherConfig(monitor_router=True))
    rid, _ = h.start(wf("s1"))
    assert _i1(h, rid) == (1, 0, 1) and h.status(rid).queue_head == ["s1"]
