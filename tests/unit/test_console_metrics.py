"""The metrics' decisions (console/metrics.py): bus events and the dispatcher's summaries in,
counter and histogram updates out, and what a scrape then reads."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from console.metrics import (
    ACTION,
    MAX_TRACKED,
    OVERHEAD,
    PAUSES,
    STALE_S,
    STEPS,
    BrokerSeen,
    Metrics,
    Tracker,
    Update,
    broker_seen,
)
from messages import events
from messages.events import Event
from messages.replay import ReplaySummary


def ev(topic: str, at: float = 100.0, source: str = "dispatcher", **data: Any) -> Event:
    return Event(topic=topic, source=source, at=at, data={"at": at, **data})


def summary(replay_id: str, status: str = "running", completed: int = 0,
            machine_id: str = "M1") -> ReplaySummary:
    return ReplaySummary(replay_id=replay_id, session_id="s", machine_id=machine_id,
                         workflow_id="wf", mode="supervised", status=status,  # type: ignore[arg-type]
                         index=completed, total=10, completed_actions=completed,
                         created_at=1.0, updated_at=1.0)


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_step_dispatched_then_reported_gives_its_duration_then_the_overhead() -> None:
    t = Tracker()
    assert t.on_event(ev(events.ACTION_DISPATCHED, 10.0, replay_id="r1", attempt_id="a1",
                         action_type="click", resent_count=0), 0.0) == []
    assert t.on_event(ev(events.ACTION_ACKED, 10.75, replay_id="r1", attempt_id="a1",
                         success=True), 0.0) == [Update("observe", ACTION, ("click",), 0.75)]
    # The next dispatch of the replay: the dispatcher's time between the two steps.
    out = t.on_event(ev(events.ACTION_DISPATCHED, 10.752, replay_id="r1", attempt_id="a2",
                        action_type="wait", resent_count=0), 0.0)
    assert [(u.kind, u.metric) for u in out] == [("observe", OVERHEAD)]
    assert abs(out[0].value - 0.002) < 1e-9


def test_waits_that_are_not_the_dispatchers_are_not_overhead() -> None:
    t = Tracker()
    t.on_event(ev(events.ACTION_DISPATCHED, 1.0, replay_id="r1", attempt_id="a1",
                  action_type="click"), 0.0)
    t.on_event(ev(events.ACTION_ACKED, 2.0, replay_id="r1", attempt_id="a1", success=True), 0.0)
    # A pause after the step: the time a person takes is not the dispatcher's.
    assert t.on_event(ev(events.REPLAY_PAUSED, 2.0, replay_id="r1", reason="loop_detected"),
                      0.0) == [Update("inc", PAUSES, ("loop_detected",))]
    assert t.on_event(ev(events.ACTION_DISPATCHED, 60.0, replay_id="r1", attempt_id="a2",
                         action_type="click"), 0.0) == []
    # A failed report is retried: no overhead either; a resend after the watchdog neither.
    t.on_event(ev(events.ACTION_ACKED, 61.0, replay_id="r1", attempt_id="a2", success=False),
               0.0)
    assert t.on_event(ev(events.ACTION_DISPATCHED, 61.1, replay_id="r1", attempt_id="a3",
                         action_type="click"), 0.0) == []
    t.on_event(ev(events.ACTION_ACKED, 62.0, replay_id="r1", attempt_id="a3", success=True),
               0.0)
    assert t.on_event(ev(events.ACTION_DISPATCHED, 70.0, replay_id="r1", attempt_id="a4",
                         action_type="click", resent_count=1), 0.0) == []
    # A step skipped in autonomous mode was never sent: nothing to time.
    assert t.on_event(ev(events.ACTION_ACKED, 71.0, replay_id="r1", outcome="skipped"),
                      0.0) == []


def test_restarts_are_the_supervisors_count_and_pauses_are_counted_by_reason() -> None:
    t = Tracker()
    # One restart event is no count of ours: the supervisor tells its own, again and again.
    assert t.on_event(ev(events.ACTOR_RESTARTED, source="supervisor", name="watchdog"),
                      0.0) == []
    assert t.on_event(ev(events.RESTART_COUNTS, source="supervisor", counts={
        "watchdog": 2, "broker": 0, "bad": -1, "worse": "x"}), 0.0) == []
    assert t.restarts == {"watchdog": 2, "broker": 0}
    t.on_event(ev(events.RESTART_COUNTS, source="supervisor", counts=[1]), 0.0)
    assert t.restarts == {"watchdog": 2, "broker": 0}  # not a count: the last one stays
    assert t.on_event(ev(events.REPLAY_PAUSED, replay_id=None, reason=3), 0.0) == [
        Update("inc", PAUSES, ("unknown",))]
    for data in ({"attempt_id": 5, "at": "x"}, {"success": "yes"}, {}):
        assert t.on_event(Event(topic=events.ACTION_ACKED, source="x", at=1.0, data=data),
                          0.0) == []
    assert t.on_event(ev(events.AUDIT_BACKLOG, pending=-1, sender="x"), 0.0) == []
    assert t.on_event(ev(events.AUDIT_BACKLOG, pending=True, sender="x"), 0.0) == []
    assert t.backlogs == {}


def test_what_a_broker_says_of_itself() -> None:
    # A broker from before mmi.broker: RFC 8's 501, a broker alone, serving.
    assert broker_seen([b"501"]) == BrokerSeen("alone", "active")
    assert broker_seen([b'{"role": "alone", "state": "active"}']) == BrokerSeen(
        "alone", "active")
    assert broker_seen([b'{"role": "primary", "state": "active", "peer_state": "passive"}']
                       ) == BrokerSeen("primary", "active")
    # A pair's broker that does not serve: passive, or still deciding.
    for state in ("passive", "backup", "primary"):
        assert broker_seen([b'{"role": "backup", "state": "%s"}' % state.encode()]
                           ) == BrokerSeen("backup", "backup")
    for garbage in ([], [b"404"], [b"\xff"], [b"[1]"], [b'{"state": "active"}'], [b"1", b"2"]):
        assert broker_seen(garbage) is None


def test_attempts_never_reported_are_forgotten_past_a_bound() -> None:
    t = Tracker()
    for i in range(MAX_TRACKED + 5):
        t.on_event(ev(events.ACTION_DISPATCHED, replay_id=f"r{i}", attempt_id=f"a{i}",
                      action_type="click"), 0.0)
    assert len(t.dispatched) == MAX_TRACKED and "a0" not in t.dispatched


def test_steps_are_counted_once_from_the_dispatchers_summaries_after_a_baseline() -> None:
    t = Tracker()
    # Before the first whole list, and the whole list itself: the baseline, not counted.
    assert t.on_summaries([summary("old", "completed", 7)], full=False) == []
    assert t.on_summaries([summary("old", "completed", 7), summary("r1", completed=2)],
                          full=True) == []
    assert t.on_summaries([summary("r1", completed=5)], full=False) == [
        Update("inc", STEPS, (), 3)]
    assert t.on_summaries([summary("r1", completed=5)], full=False) == []  # seen already
    # A replay first seen now: every step it did is new. The old one is still counted once.
    assert t.on_summaries([summary("r2", completed=4), summary("old", "completed", 7)],
                          full=True) == [Update("inc", STEPS, (), 4)]
    assert t.status == {"old": "completed", "r1": "running", "r2": "running"}


def test_a_scrape_reads_the_counters_histograms_and_gauges() -> None:
    clock = [1000.0]
    m = Metrics(lambda: clock[0])
    m.on_summaries([summary("r1", completed=0)], full=True)
    m.on_summaries([summary("r1", "paused_need_help", 3), summary("r2", completed=1)], False)
    m.on_event(ev(events.ACTION_DISPATCHED, 1.0, replay_id="r1", attempt_id="a1",
                  action_type="click"))
    m.on_event(ev(events.ACTION_ACKED, 1.3, replay_id="r1", attempt_id="a1", success=True))
    m.on_event(ev(events.REPLAY_PAUSED, 1.3, replay_id="r1", reason="pause_for_human"))
    m.on_event(ev(events.RESTART_COUNTS, source="supervisor", counts={"dispatcher": 1,
                                                                       "watchdog": 0}))
    m.tracker.brokers = {"tcp://a:5555": BrokerSeen("primary", "active"),
                         "tcp://b:5555": None}
    m.on_event(ev(events.AUDIT_BACKLOG, sender="dispatcher", pending=12))
    m.console_backlog = 0
    m.tracker.on_agents({"M1": 1234.5}, {"M1": True, "M2": False})
    got = samples(m)
    assert got[("lea_steps_completed_total", ())] == 4
    assert got[("lea_replays", (("state", "paused_need_help"),))] == 1
    assert got[("lea_replays", (("state", "running"),))] == 1
    assert got[("lea_replays", (("state", "completed"),))] == 0
    assert got[("lea_pauses_total", (("reason", "pause_for_human"),))] == 1
    assert got[("lea_actor_restarts_total", (("actor", "dispatcher"),))] == 1
    assert got[("lea_actor_restarts_total", (("actor", "watchdog"),))] == 0
    assert got[("lea_action_duration_seconds_count", (("action_type", "click"),))] == 1
    assert abs(got[("lea_action_duration_seconds_sum", (("action_type", "click"),))]
               - 0.3) < 1e-9
    assert ("lea_step_overhead_seconds_count", ()) in got
    assert got[("lea_agent_connected", (("machine_id", "M1"),))] == 1
    assert got[("lea_agent_connected", (("machine_id", "M2"),))] == 0
    assert got[("lea_agent_last_heartbeat_timestamp_seconds", (("machine_id", "M1"),))] \
        == 1234.5
    role = (("configured", "primary"), ("endpoint", "tcp://a:5555"))
    assert got[("lea_broker_role", (*role, ("role", "active")))] == 1
    assert got[("lea_broker_role", (*role, ("role", "backup")))] == 0
    assert got[("lea_broker_up", (("endpoint", "tcp://a:5555"),))] == 1
    # A broker that does not answer: down, and no role said for it.
    assert got[("lea_broker_up", (("endpoint", "tcp://b:5555"),))] == 0
    assert not [k for k in got if k[0] == "lea_broker_role" and ("endpoint", "tcp://b:5555")
                in k[1]]
    assert got[("lea_audit_backlog", (("sender", "dispatcher"),))] == 12
    assert got[("lea_audit_backlog", (("sender", "console"),))] == 0

    # A backlog no longer told is not shown any more; the console's own is read, not told.
    clock[0] += STALE_S + 1
    after = samples(m)
    assert ("lea_audit_backlog", (("sender", "dispatcher"),)) not in after
    assert after[("lea_audit_backlog", (("sender", "console"),))] == 0  # read, not told


def test_work_items_at_risk_are_counted_by_queue() -> None:
    m = Metrics(lambda: 0.0)
    m.on_event(ev(events.QUEUE_ITEM_AT_RISK, queue="admissions", reference="a"))
    m.on_event(ev(events.QUEUE_ITEM_AT_RISK, queue="admissions", reference="b"))
    m.on_event(ev(events.QUEUE_ITEM_AT_RISK, queue=None, reference="c"))
    got = samples(m)
    assert got[("lea_queue_items_at_risk_total", (("queue", "admissions"),))] == 2
    assert got[("lea_queue_items_at_risk_total", (("queue", "unknown"),))] == 1


def test_queues_and_pools_as_the_dispatcher_lists_them() -> None:
    m = Metrics(lambda: 0.0)
    m.tracker.on_queues(
        [{"name": "admissions", "counts": {"new": 3, "done": 2}, "oldest_waiting_s": 42.5},
         {"name": None, "counts": "bad", "oldest_waiting_s": "x"}],
        [{"machine_id": "p1", "pool": "ward", "state": "idle"},
         {"machine_id": "p2", "pool": "ward", "state": "idle"},
         {"machine_id": "p3", "pool": "ward", "state": "offline"}])
    got = samples(m)
    assert got[("lea_queue_items", (("queue", "admissions"), ("state", "new")))] == 3
    assert got[("lea_queue_items", (("queue", "admissions"), ("state", "needs_person")))] == 0
    assert got[("lea_queue_oldest_waiting_seconds", (("queue", "admissions"),))] == 42.5
    assert got[("lea_queue_items", (("queue", "unknown"), ("state", "new")))] == 0
    assert got[("lea_pool_agents", (("pool", "ward"), ("state", "idle")))] == 2
    assert got[("lea_pool_agents", (("pool", "ward"), ("state", "offline")))] == 1
