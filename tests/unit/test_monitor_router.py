"""The monitor router's cascade (docs/screens-and-pauses.md)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from actors.monitor_router.core import (
    AgentScreen,
    MonitorRouterConfig,
    MonitorRouterCore,
    resolve,
)
from messages import events
from messages.monitor import MAX_MONITORS, AgentHeartbeat, Monitor, ResolveMonitor
from messages.workflow import Action, SetupSpec
from workflow.monitors import find_recorded

TTL = 10.0
NOW = 1000.0

TWO_MONITORS = [
    Monitor(idx=0, x=0, y=0, w=1920, h=1080, primary=True, name="DISPLAY1"),
    Monitor(idx=1, x=1920, y=0, w=1920, h=1080, name="DISPLAY2"),
]

# A laptop (primary) with a monitor left of it (negative origin, Windows) and one above right.
THREE_MONITORS = [
    Monitor(idx=0, x=0, y=0, w=1366, h=768, primary=True, name="DISPLAY1"),
    Monitor(idx=1, x=-1280, y=-256, w=1280, h=1024, name="DISPLAY2"),
    Monitor(idx=2, x=1366, y=-312, w=1920, h=1080, name="DISPLAY3"),
]


def screen(monitors: list[Monitor], focus: int | None = 0, received_at: float = NOW,
           machine_id: str = "m1") -> AgentScreen:
    return AgentScreen(machine_id, tuple(monitors), focus, "Dossier patient", received_at - 1,
                       received_at)


def request(monitor_index: int | None = None, monitor_geometry: Monitor | None = None,
            **kw: Any) -> ResolveMonitor:
    return ResolveMonitor(machine_id="m1", action_id="a1", action_type="click",
                          monitor_index=monitor_index, monitor_geometry=monitor_geometry,
                          replay_id="r1", **kw)


def topics(routed_events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [t for t, _ in routed_events]


# The four cases of the origin plan ------------------------------------------------------------

def test_resolve_uses_action_monitor_index_when_present() -> None:
    routed = resolve(request(1), screen(TWO_MONITORS, focus=0), NOW, TTL)
    t = routed.target
    assert (t.idx, t.offset_x, t.offset_y, t.w, t.h, t.source) == (1, 1920, 0, 1920, 1080,
                                                                   "action")
    assert t.reason is None
    assert topics(routed.events) == [events.MONITOR_ROUTED]


def test_resolve_falls_back_to_focused_monitor_when_action_missing() -> None:
    routed = resolve(request(), screen(TWO_MONITORS, focus=1), NOW, TTL)
    assert (routed.target.idx, routed.target.source, routed.target.offset_x) == (1, "focus",
                                                                                 1920)
    assert topics(routed.events) == [events.MONITOR_ROUTED]


def test_resolve_falls_back_to_composite_when_geometry_empty() -> None:
    routed = resolve(request(1), screen([], focus=None), NOW, TTL)
    t = routed.target
    assert (t.idx, t.offset_x, t.offset_y, t.source, t.reason) == (
        -1, 0, 0, "composite_fallback", "no_geometry")


def test_resolve_falls_back_when_action_index_out_of_range() -> None:
    """Index 5 on a two-monitor agent: that screen is not plugged → focus + unavailable."""
    routed = resolve(request(5), screen(TWO_MONITORS, focus=0), NOW, TTL)
    assert (routed.target.idx, routed.target.source) == (0, "focus")
    assert routed.target.reason == "recorded_monitor_unavailable"
    assert topics(routed.events) == [events.MONITOR_UNAVAILABLE, events.MONITOR_ROUTED]
    unavailable = routed.events[0][1]
    assert unavailable["monitor_index"] == 5 and unavailable["fallback"] == "focus"
    assert len(unavailable["monitors"]) == 2


# Unplugged, invalid, negative origin, three monitors ------------------------------------------

def test_unplugged_recorded_monitor_is_not_replaced_by_the_next_one_in_line() -> None:
    """Recorded on the middle of three screens; it is unplugged, so the old idx 2 is now
    idx 1. Matching by index alone would click on the wrong screen: the router must notice."""
    recorded = Monitor(idx=1, x=1920, y=0, w=1920, h=1080, name="DISPLAY2")
    now_two = [TWO_MONITORS[0], Monitor(idx=1, x=1920, y=0, w=2560, h=1440, name="DISPLAY3")]
    routed = resolve(request(1, recorded), screen(now_two, focus=0), NOW, TTL)
    assert (routed.target.idx, routed.target.source) == (0, "focus")
    assert routed.target.reason == "recorded_monitor_unavailable"
    assert topics(routed.events) == [events.MONITOR_UNAVAILABLE, events.MONITOR_ROUTED]
    assert routed.events[0][1]["monitor_geometry"]["name"] == "DISPLAY2"


def test_unplugged_without_focus_falls_back_to_the_composite() -> None:
    routed = resolve(request(3), screen(TWO_MONITORS, focus=None), NOW, TTL)
    assert routed.target.source == "composite_fallback"
    assert routed.target.reason == "recorded_monitor_unavailable"
    assert routed.events[0][1]["fallback"] == "composite_fallback"


@pytest.mark.parametrize("index", [-1, -7, 16, 1000])
def test_invalid_index_goes_to_the_composite_with_an_error_event(index: int) -> None:
    routed = resolve(request(index), screen(TWO_MONITORS, focus=1), NOW, TTL)
    t = routed.target
    assert (t.idx, t.offset_x, t.offset_y, t.source, t.reason) == (
        -1, 0, 0, "composite_fallback", "invalid_index")
    assert topics(routed.events) == [events.MONITOR_INVALID_INDEX, events.MONITOR_ROUTED]
    assert routed.events[0][1]["monitor_index"] == index


@pytest.mark.parametrize("index", [-1, MAX_MONITORS, 1000])
def test_a_workflow_cannot_name_an_index_the_router_would_call_invalid(index: int) -> None:
    click = {"action_id": "c", "type": "click", "target_spec": {"x_pct": 0.5, "y_pct": 0.5}}
    with pytest.raises(ValidationError, match="monitor_index"):
        Action.model_validate({**click, "monitor_index": index})
    with pytest.raises(ValidationError, match="monitor_index"):
        SetupSpec(app_name="Bloc-notes", monitor_index=index)
    last = Action.model_validate({**click, "monitor_index": MAX_MONITORS - 1})
    assert resolve(request(last.monitor_index), screen(TWO_MONITORS), NOW,
                   TTL).target.reason != "invalid_index"


def test_negative_origin_monitor_gives_negative_offsets() -> None:
    routed = resolve(request(1), screen(THREE_MONITORS), NOW, TTL)
    t = routed.target
    assert (t.idx, t.offset_x, t.offset_y, t.w, t.h, t.source) == (1, -1280, -256, 1280,
                                                                   1024, "action")
    # a click at local (640, 512) lands at absolute (-640, 256): left of the primary
    assert (640 + t.offset_x, 512 + t.offset_y) == (-640, 256)


def test_three_monitors_each_index_reaches_its_own_screen() -> None:
    for monitor in THREE_MONITORS:
        t = resolve(request(monitor.idx), screen(THREE_MONITORS), NOW, TTL).target
        assert (t.idx, t.offset_x, t.offset_y, t.w, t.h) == (monitor.idx, *monitor.rect)
        assert t.source == "action"


def test_three_monitors_focus_on_the_third() -> None:
    t = resolve(request(), screen(THREE_MONITORS, focus=2), NOW, TTL).target
    assert (t.idx, t.offset_x, t.offset_y, t.source) == (2, 1366, -312, "focus")


# Matching by geometry and name, not enumeration order -----------------------------------------

def test_recorded_geometry_wins_over_a_changed_numbering() -> None:
    """The recorded screen (idx 2 when recorded) is idx 1 today: found by its geometry."""
    recorded = THREE_MONITORS[2].model_copy(update={"idx": 2})
    today = [THREE_MONITORS[0], THREE_MONITORS[2].model_copy(update={"idx": 1})]
    t = resolve(request(2, recorded), screen(today), NOW, TTL).target
    assert (t.idx, t.offset_x, t.source, t.reason) == (1, 1366, "action", "renumbered")


def test_a_moved_monitor_is_found_by_name_and_size() -> None:
    recorded = TWO_MONITORS[1]
    moved = [TWO_MONITORS[0], TWO_MONITORS[1].model_copy(update={"x": 0, "y": 1080})]
    t = resolve(request(1, recorded), screen(moved), NOW, TTL).target
    assert (t.idx, t.offset_x, t.offset_y, t.reason) == (1, 0, 1080, "moved")


def test_a_renamed_monitor_is_found_by_its_rectangle() -> None:
    recorded = TWO_MONITORS[1]
    renamed = [TWO_MONITORS[0], TWO_MONITORS[1].model_copy(update={"name": "DISPLAY5"})]
    t = resolve(request(1, recorded), screen(renamed), NOW, TTL).target
    assert (t.idx, t.source, t.reason) == (1, "action", "renamed")


def test_two_identical_monitors_swapped_are_told_apart_by_name() -> None:
    recorded = TWO_MONITORS[1]  # DISPLAY2 at x=1920
    swapped = [Monitor(idx=0, x=0, y=0, w=1920, h=1080, primary=True, name="DISPLAY2"),
               Monitor(idx=1, x=1920, y=0, w=1920, h=1080, name="DISPLAY1")]
    found = find_recorded(swapped, 1, recorded)
    assert found is not None and found[0].name == "DISPLAY2" and found[1] == "moved"


def test_geometry_only_recording_without_index_is_routed() -> None:
    t = resolve(request(None, THREE_MONITORS[1]), screen(THREE_MONITORS), NOW, TTL).target
    assert (t.idx, t.source, t.reason) == (1, "action", None)


def test_an_action_of_the_dsl_maps_to_the_request() -> None:
    action = Action(action_id="s1", type="click", monitor_index=1,
                    monitor_geometry=TWO_MONITORS[1])
    req = ResolveMonitor(machine_id="m1", action_id=action.action_id, action_type=action.type,
                         monitor_index=action.monitor_index,
                         monitor_geometry=action.monitor_geometry)
    assert resolve(req, screen(TWO_MONITORS), NOW, TTL).target.offset_x == 1920


# Heartbeats: missing, stale, per machine -------------------------------------------------------

def test_no_heartbeat_and_stale_heartbeat_mean_the_composite() -> None:
    assert resolve(request(1), None, NOW, TTL).target.reason == "no_heartbeat"
    old = screen(TWO_MONITORS, received_at=NOW - TTL - 0.5)
    assert resolve(request(1), old, NOW, TTL).target.reason == "stale_heartbeat"
    fresh = screen(TWO_MONITORS, received_at=NOW - TTL + 0.5)
    assert resolve(request(1), fresh, NOW, TTL).target.source == "action"


def test_every_resolution_is_announced_with_who_and_where() -> None:
    routed = resolve(request(1), screen(TWO_MONITORS), NOW, TTL)
    topic, data = routed.events[-1]
    assert topic == events.MONITOR_ROUTED
    assert {k: data[k] for k in ("machine_id", "action_id", "replay_id", "idx", "source",
                                 "offset_x")} == {"machine_id": "m1", "action_id": "a1",
                                                  "replay_id": "r1", "idx": 1,
                                                  "source": "action", "offset_x": 1920}


def heartbeat(machine_id: str, monitors: list[Monitor], focus: int | None) -> AgentHeartbeat:
    return AgentHeartbeat(machine_id=machine_id, monitor_index=focus,
                          monitors_geometry=monitors, active_window_title="t", at=1.0)


def test_core_keeps_one_screen_per_machine_and_forgets_silent_ones() -> None:
    core = MonitorRouterCore(MonitorRouterConfig(heartbeat_ttl_s=TTL, forget_after_s=100,
                                                 max_agents=2))
    core.heartbeat(heartbeat("m1", TWO_MONITORS, 1), NOW)
    core.heartbeat(heartbeat("m2", THREE_MONITORS, 2), NOW)
    assert core.resolve(request(), NOW).target.offset_x == 1920  # m1's focus, not m2's
    req2 = request().model_copy(update={"machine_id": "m2"})
    assert core.resolve(req2, NOW).target.offset_x == 1366
    core.heartbeat(heartbeat("m1", TWO_MONITORS, 0), NOW + 50)  # a newer heartbeat replaces
    assert core.resolve(request(), NOW + 50).target.idx == 0
    core.heartbeat(heartbeat("m3", [], None), NOW + 60)  # over max_agents: m2 (oldest) goes
    assert set(core.agents) == {"m1", "m3"}
    assert core.expire(NOW + 155) == ["m1"]
    assert set(core.agents) == {"m3"}


def test_heartbeat_validation_refuses_duplicate_or_absurd_monitors() -> None:
    with pytest.raises(ValidationError, match="unique"):
        heartbeat("m1", [TWO_MONITORS[0], TWO_MONITORS[0]], 0)
    with pytest.raises(ValidationError):
        Monitor(idx=0, x=0, y=0, w=0, h=1080)
    with pytest.raises(ValidationError):
        AgentHeartbeat(machine_id="m1", monitor_index=-1, at=1.0)
    with pytest.raises(ValidationError):
        AgentHeartbeat(machine_id="", at=1.0)


def test_a_late_older_heartbeat_does_not_replace_a_fresh_one() -> None:
    core = MonitorRouterCore(MonitorRouterConfig(heartbeat_ttl_s=TTL))
    newer = heartbeat("m1", TWO_MONITORS, 1).model_copy(update={"at": 50.0})
    older = heartbeat("m1", TWO_MONITORS, 0).model_copy(update={"at": 40.0})
    assert core.heartbeat(newer, NOW) is not None
    assert core.heartbeat(older, NOW + 1) is None
    assert core.resolve(request(), NOW + 1).target.idx == 1
    # past the TTL the known one is stale: an agent whose clock went back is believed again
    assert core.heartbeat(older, NOW + TTL + 1) is not None
    assert core.resolve(request(), NOW + TTL + 1).target.idx == 0
