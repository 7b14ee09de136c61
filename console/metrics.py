"""The tree's Prometheus metrics (docs/metrics.md, docs/operations.md): what they count, and
how each fact becomes a number. Pure: no sockets, no clock of its own (callers pass
``now``, monotonic); console/scrape.py feeds it and serves ``/metrics``.

Each fact is taken where it already exists:

- bus events (:meth:`Tracker.on_event`): pauses by reason, the timings of a
  step (``lea:action_dispatched`` → ``lea:action_acked`` of the same attempt is the action's
  duration; a step's successful report → the next dispatch of its replay is the per-step
  overhead), the supervisor's count of restarts of each child, and the senders' audit
  backlogs (these two told again every few seconds, so a lost event costs nothing; a
  backlog not heard of for :data:`STALE_S` is dropped rather than shown stale);
- the dispatcher's summaries (:meth:`Tracker.on_summaries`): replays by state, and the steps
  completed, counted from each replay's ``completed_actions`` (the dispatcher's own count,
  not the lossy bus): the replays of the first full list are the baseline, the steps done
  after it are counted once each;
- monitor_router's status and the broker's MMI (:meth:`Tracker.on_agents`): the agents'
  last heartbeats, and whether each serves its ``agent.M`` service (connected);
- each broker's own word, MMI ``mmi.broker`` (:func:`broker_seen`): its configured role
  (``alone``, or ``primary`` / ``backup`` in a pair) and whether it serves now (``active``)
  or not (``backup``). A broker that predates ``mmi.broker`` answers 501: it is alone.

An event or a list in, :class:`Update` values out; :class:`Metrics` applies them to its own
registry and reads the gauges from the tracker at each scrape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar, get_args

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from messages import events
from messages.events import Event
from messages.queue import ItemStateName
from messages.replay import ReplayStatusName, ReplaySummary

K = TypeVar("K")
V = TypeVar("V")

STALE_S: Final = 30.0
"""An audit backlog not told again for this long is no longer shown."""
MAX_TRACKED: Final = 10_000
"""Attempts in flight (and replays between two steps) remembered for the timings."""
OVERHEAD_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                           1.0, 2.5, 5.0)
ACTION_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
STATES: Final[tuple[str, ...]] = get_args(ReplayStatusName)
ROLES: Final = ("active", "backup")
ITEM_STATES: Final[tuple[str, ...]] = get_args(ItemStateName)

STEPS: Final = "lea_steps_completed"
PAUSES: Final = "lea_pauses"
AT_RISK: Final = "lea_queue_items_at_risk"
OVERHEAD: Final = "lea_step_overhead_seconds"
ACTION: Final = "lea_action_duration_seconds"


@dataclass(frozen=True, slots=True)
class Update:
    """One change to a counter (``inc``) or a histogram (``observe``)."""

    kind: Literal["inc", "observe"]
    metric: str
    labels: tuple[str, ...] = ()
    value: float = 1.0


@dataclass(frozen=True, slots=True)
class Told:
    """A value a process tells again and again (its backlog), and when we heard it."""

    value: int
    heard_at: float


@dataclass(frozen=True, slots=True)
class BrokerSeen:
    """A broker's word on itself: ``configured`` (alone, primary, backup) and ``role``."""

    configured: str
    role: Literal["active", "backup"]


def broker_seen(answer: list[bytes]) -> BrokerSeen | None:
    """What an ``mmi.broker`` answer says; None if it says nothing we can read.

    ``501`` (RFC 8: no such MMI service) is a broker alone, from before ``mmi.broker``: it
    serves. Else a JSON object with ``role`` and ``state``; only ``active`` serves (a broker
    of a pair still deciding, or passive, does not)."""
    if answer == [b"501"]:
        return BrokerSeen("alone", "active")
    try:
        said = json.loads(answer[0]) if len(answer) == 1 else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(said, dict) or not isinstance(said.get("role"), str):
        return None
    configured = said["role"][:32] or "unknown"
    return BrokerSeen(configured, "active" if said.get("state") == "active" else "backup")


@dataclass
class Tracker:
    """What the metrics remember between two facts."""

    status: dict[str, str] = field(default_factory=dict)
    """replay id → its last status (from the dispatcher's summaries)."""
    completed: dict[str, int] = field(default_factory=dict)
    machines: set[str] = field(default_factory=set)
    baseline_done: bool = False
    dispatched: dict[str, tuple[float, str]] = field(default_factory=dict)
    """attempt id → (dispatched at, action type), until its report."""
    reported: dict[str, float] = field(default_factory=dict)
    """replay id → when its last step's report was applied, until its next dispatch."""
    brokers: dict[str, BrokerSeen | None] = field(default_factory=dict)
    """broker endpoint → what it said of itself, None when it did not answer."""
    backlogs: dict[str, Told] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    """child → its restarts, as the supervisor last told them (its own count)."""
    heartbeats: dict[str, float] = field(default_factory=dict)
    connected: dict[str, bool] = field(default_factory=dict)
    queues: list[dict[str, Any]] = field(default_factory=list)
    """The dispatcher's work queues (``queue.list``: counts by state, oldest waiting)."""
    pool_agents: list[dict[str, Any]] = field(default_factory=list)
    """The agents the dispatcher heard of, with their pool and state."""

    # -- bus events ------------------------------------------------------------------------

    def on_event(self, event: Event, now: float) -> list[Update]:
        """The updates ``event`` makes (``now``: monotonic, for the told values)."""
        d, topic = event.data, event.topic
        at = _number(d.get("at"), event.at)
        if topic == events.REPLAY_PAUSED:
            self.reported.pop(_text(d.get("replay_id")), None)
            return [Update("inc", PAUSES, (_text(d.get("reason"), "unknown"),))]
        if topic == events.QUEUE_ITEM_AT_RISK:
            return [Update("inc", AT_RISK, (_text(d.get("queue"), "unknown"),))]
        if topic == events.ACTION_DISPATCHED:
            return self._dispatched(d, at)
        if topic == events.ACTION_ACKED:
            return self._acked(d, at)
        if topic in (events.REPLAY_CANCELLED, events.REPLAY_COMPLETED):
            self.reported.pop(_text(d.get("replay_id")), None)
        elif topic == events.RESTART_COUNTS and isinstance(d.get("counts"), dict):
            self.restarts = {name: n for name, n in d["counts"].items()
                             if isinstance(name, str) and _count(n) is not None}
        elif topic == events.AUDIT_BACKLOG and _count(d.get("pending")) is not None:
            self.backlogs[_text(d.get("sender"), event.source)] = Told(
                int(d["pending"]), now)
        return []

    def _dispatched(self, d: Mapping[str, object], at: float) -> list[Update]:
        attempt, replay_id = _text(d.get("attempt_id")), _text(d.get("replay_id"))
        out: list[Update] = []
        since = self.reported.pop(replay_id, None)
        if since is not None and not d.get("resent_count") and at >= since:
            out.append(Update("observe", OVERHEAD, (), at - since))
        if attempt:
            _bounded_put(self.dispatched, attempt, (at, _text(d.get("action_type"), "unknown")))
        return out

    def _acked(self, d: Mapping[str, object], at: float) -> list[Update]:
        if d.get("outcome") == "skipped":
            return []  # never sent to an agent: no duration, and no overhead to time
        out: list[Update] = []
        sent = self.dispatched.pop(_text(d.get("attempt_id")), None)
        if sent is not None and at >= sent[0]:
            out.append(Update("observe", ACTION, (sent[1],), at - sent[0]))
        replay_id = _text(d.get("replay_id"))
        if d.get("success") is True and replay_id:
            _bounded_put(self.reported, replay_id, at)
        return out

    # -- the dispatcher's summaries --------------------------------------------------------

    def on_summaries(self, summaries: Iterable[ReplaySummary], full: bool) -> list[Update]:
        """The steps completed since the last summaries (``full``: every replay is there)."""
        done = 0
        for s in summaries:
            self.status[s.replay_id] = s.status
            self.machines.add(s.machine_id)
            before = self.completed.get(s.replay_id, 0)
            if s.completed_actions > before:
                self.completed[s.replay_id] = s.completed_actions
                done += s.completed_actions - before
        if not self.baseline_done:
            self.baseline_done = full  # what was done before we looked is not counted
            return []
        return [Update("inc", STEPS, (), done)] if done else []

    # -- agents ----------------------------------------------------------------------------

    def on_agents(self, heartbeats: Mapping[str, float],
                  connected: Mapping[str, bool] | None) -> None:
        """monitor_router's last heartbeat of each agent (wall-clock time) and, when the
        broker answered, whether each known agent serves its service."""
        self.heartbeats = dict(heartbeats)
        self.machines.update(heartbeats)
        self.connected = dict(connected) if connected is not None else {}

    def on_queues(self, queues: list[dict[str, Any]], agents: list[dict[str, Any]]) -> None:
        """The dispatcher's ``queue.list`` answer (docs/queues.md)."""
        self.queues, self.pool_agents = list(queues), list(agents)

    def queue_gauges(self) -> list[GaugeMetricFamily]:
        items = GaugeMetricFamily("lea_queue_items", "Work items by queue and state",
                                  labels=["queue", "state"])
        oldest = GaugeMetricFamily("lea_queue_oldest_waiting_seconds",
                                   "Age of the oldest item waiting for an agent",
                                   labels=["queue"])
        for q in self.queues:
            name = _text(q.get("name"), "unknown")
            said = q.get("counts")
            counts: dict[str, Any] = said if isinstance(said, dict) else {}
            for state in ITEM_STATES:
                items.add_metric([name, state], _number(counts.get(state), 0.0))
            oldest.add_metric([name], _number(q.get("oldest_waiting_s"), 0.0))
        agents = GaugeMetricFamily("lea_pool_agents", "Agents by pool and state (idle, busy, "
                                   "paused, offline)", labels=["pool", "state"])
        by: dict[tuple[str, str], int] = {}
        for a in self.pool_agents:
            key = (_text(a.get("pool"), "unknown"), _text(a.get("state"), "unknown"))
            by[key] = by.get(key, 0) + 1
        for (pool, state), n in sorted(by.items()):
            agents.add_metric([pool, state], n)
        return [items, oldest, agents]

    # -- gauges at a scrape ----------------------------------------------------------------

    def gauges(self, now: float, console_backlog: int | None
               ) -> list[GaugeMetricFamily | CounterMetricFamily]:
        replays = GaugeMetricFamily("lea_replays", "Replays by state (the dispatcher's word)",
                                    labels=["state"])
        counts = dict.fromkeys(STATES, 0)
        for status in self.status.values():
            counts[status] = counts.get(status, 0) + 1
        for state, n in sorted(counts.items()):
            replays.add_metric([state], n)
        connected = GaugeMetricFamily(
            "lea_agent_connected", "1 while the agent serves its agent.M service at the broker",
            labels=["machine_id"])
        for machine, serves in sorted(self.connected.items()):
            connected.add_metric([machine], 1 if serves else 0)
        heartbeat = GaugeMetricFamily(
            "lea_agent_last_heartbeat_timestamp_seconds",
            "When monitor_router last heard the agent's screen heartbeat (Unix time)",
            labels=["machine_id"])
        for machine, at in sorted(self.heartbeats.items()):
            heartbeat.add_metric([machine], at)
        up = GaugeMetricFamily("lea_broker_up", "1 while the broker answers (mmi.broker)",
                               labels=["endpoint"])
        role = GaugeMetricFamily(
            "lea_broker_role", "1 for what the broker is now: active (it serves) or backup",
            labels=["endpoint", "configured", "role"])
        for endpoint, seen in sorted(self.brokers.items()):
            up.add_metric([endpoint], 0 if seen is None else 1)
            if seen is not None:
                for name in ROLES:
                    role.add_metric([endpoint, seen.configured, name],
                                    1 if seen.role == name else 0)
        backlog = GaugeMetricFamily(
            "lea_audit_backlog", "Audit records a sender holds that audit_log has not "
            "acknowledged yet", labels=["sender"])
        backlogs = {k: v.value for k, v in self._fresh(self.backlogs, now).items()}
        if console_backlog is not None:
            backlogs["console"] = console_backlog
        for sender, n in sorted(backlogs.items()):
            backlog.add_metric([sender], n)
        restarts = CounterMetricFamily(
            "lea_actor_restarts", "Restarts of each child of the supervisor since it started "
            "(its own count)", labels=["actor"])
        for actor, n in sorted(self.restarts.items()):
            restarts.add_metric([actor], n)
        return [replays, connected, heartbeat, up, role, backlog, restarts,
                *self.queue_gauges()]

    @staticmethod
    def _fresh(told: dict[K, Told], now: float) -> dict[K, Told]:
        for key in [k for k, v in told.items() if now - v.heard_at > STALE_S]:
            del told[key]
        return told


class Metrics:
    """A registry of its own (not the library's global one) holding the tree's metrics;
    ``clock``: monotonic seconds, for the told values' freshness."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.tracker = Tracker()
        self.clock = clock
        self.console_backlog: int | None = None
        r = self.registry
        self._counters = {
            STEPS: Counter(STEPS, "Steps completed (rate() gives steps per second)",
                           registry=r),
            PAUSES: Counter(PAUSES, "Replay pauses by reason", ["reason"], registry=r),
            AT_RISK: Counter(AT_RISK, "Work items that became at risk of missing their "
                             "deadline (docs/queues.md)", ["queue"], registry=r),
        }
        self._histograms = {
            OVERHEAD: Histogram(OVERHEAD, "The dispatcher's time from a step's report to the "
                                "next step's dispatch", buckets=OVERHEAD_BUCKETS, registry=r),
            ACTION: Histogram(ACTION, "From an action's dispatch to its report (the agent's "
                              "work and the way there and back)", ["action_type"],
                              buckets=ACTION_BUCKETS, registry=r),
        }
        r.register(_Gauges(self))

    def apply(self, updates: Iterable[Update]) -> None:
        for u in updates:
            if u.kind == "inc":
                counter = self._counters[u.metric]
                (counter.labels(*u.labels) if u.labels else counter).inc(u.value)
            else:
                histogram = self._histograms[u.metric]
                (histogram.labels(*u.labels) if u.labels else histogram).observe(u.value)

    def on_event(self, event: Event) -> None:
        self.apply(self.tracker.on_event(event, self.clock()))

    def on_summaries(self, summaries: Iterable[ReplaySummary], full: bool) -> None:
        self.apply(self.tracker.on_summaries(summaries, full))


class _Gauges(Collector):
    """The gauges, read from the tracker at each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        m = self._metrics
        yield from m.tracker.gauges(m.clock(), m.console_backlog)


def _text(value: object, default: str = "") -> str:
    return value if isinstance(value, str) and value else default


def _number(value: object, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _bounded_put(d: dict[K, V], key: K, value: V) -> None:
    """``d[key] = value``, forgetting the oldest entries past :data:`MAX_TRACKED` (their
    report never came, or was lost on the bus)."""
    d.pop(key, None)
    d[key] = value
    while len(d) > MAX_TRACKED:
        del d[next(iter(d))]
