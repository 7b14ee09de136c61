"""The watchdog's pure decisions: orphan after the timeout, resend up to the budget, then
give up; kill switch; rebuild after a restart keeps real ages; I5-style attempt checks."""

from __future__ import annotations

import pytest

from actors.watchdog.core import WatchdogConfig, WatchdogCore
from messages.dispatch import InFlight, OrphanGiveUp, OrphanResend


def entry(action_id: str = "a1", attempt_id: str = "t1", resent: int = 0,
          dispatched_at: float = 1000.0) -> InFlight:
    return InFlight(replay_id="r", session_id="s", machine_id="M", action_id=action_id,
                    attempt_id=attempt_id, action_type="click", dispatched_at=dispatched_at,
                    resent_count=resent)


def core(**overrides: object) -> WatchdogCore:
    return WatchdogCore(WatchdogConfig.model_validate(overrides))


def test_defaults_are_the_designs(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENABLED", "SCAN_INTERVAL_S", "ORPHAN_TIMEOUT_S", "MAX_RESENDS",
                 "REPUSH_POSITION"):
        monkeypatch.delenv(f"RPA_WATCHDOG_{name}", raising=False)
    config = WatchdogConfig()
    assert (config.enabled, config.scan_interval_s, config.orphan_timeout_s,
            config.max_resends, config.repush_position) == (True, 10.0, 45.0, 2, "head")


def test_env_vars_keep_the_spec_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RPA_WATCHDOG_ORPHAN_TIMEOUT_S", "30")
    monkeypatch.setenv("RPA_WATCHDOG_ENABLED", "0")
    monkeypatch.setenv("RPA_WATCHDOG_REPUSH_POSITION", "head")
    config = WatchdogConfig()
    assert (config.orphan_timeout_s, config.enabled, config.repush_position) == (30, False,
                                                                                 "head")


def test_repush_at_the_tail_is_refused_not_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RPA_WATCHDOG_REPUSH_POSITION", "tail")
    with pytest.raises(ValueError, match="'tail' is not supported"):
        WatchdogConfig()


def test_no_question_before_the_timeout() -> None:
    w = core()
    w.track(entry(), now=0.0)
    assert w.scan(45.0) == []


def test_orphan_is_resent_then_given_up() -> None:
    w = core()
    w.track(entry(resent=0), now=0.0)
    [q] = w.scan(46.0)
    assert isinstance(q, OrphanResend) and q.attempt_id == "t1" and q.position == "head"
    assert w.scan(100.0) == []  # asked once per attempt
    w.track(entry(attempt_id="t2", resent=1), now=100.0)  # the dispatcher resent it
    [q] = w.scan(146.0)
    assert isinstance(q, OrphanResend) and q.attempt_id == "t2"
    w.track(entry(attempt_id="t3", resent=2), now=150.0)
    [q] = w.scan(196.0)
    assert isinstance(q, OrphanGiveUp) and q.resent_count == 2


def test_kill_switch_asks_nothing() -> None:
    w = core(enabled=False)
    w.track(entry(), now=0.0)
    assert w.scan(1e6) == []


def test_untrack_only_removes_the_named_attempt() -> None:
    w = core()
    w.track(entry(attempt_id="t2"), now=0.0)
    assert not w.untrack("a1", "t1")  # a late untrack of an older attempt
    assert len(w) == 1
    assert w.untrack("a1", "t2")
    assert len(w) == 0


def test_unanswered_question_is_asked_again() -> None:
    w = core()
    w.track(entry(), now=0.0)
    assert len(w.scan(50.0)) == 1
    w.unanswered("a1", "t1")
    assert len(w.scan(60.0)) == 1


def test_rebuild_keeps_the_age_and_newer_tracks() -> None:
    w = core()
    w.track(entry("a2", "new"), now=500.0)
    w.rebuild([entry("a1", dispatched_at=1000.0), entry("a2", "old")], now=500.0,
              wall_now=1040.0)
    assert len(w) == 2
    assert w.scan(504.0) == []
    [q] = w.scan(506.0)  # a1 was already 40 s old when the list arrived
    assert q.action_id == "a1"
    assert not w.untrack("a2", "old")  # the Track that overtook the list won


def test_same_action_id_in_two_replays_has_two_timers() -> None:
    w = core()
    w.track(entry("a1", "t1").model_copy(update={"replay_id": "r1"}), now=0.0)
    w.track(entry("a1", "t2").model_copy(update={"replay_id": "r2"}), now=0.0)
    assert len(w) == 2
    assert {q.attempt_id for q in w.scan(46.0)} == {"t1", "t2"}
