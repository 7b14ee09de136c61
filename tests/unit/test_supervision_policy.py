"""The pure restart policy: restart types, strategies, intensity (OTP semantics)."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervision.policy import (
    Decision,
    Exit,
    ExitReason,
    RestartIntensity,
    RestartPolicy,
    RestartType,
    Strategy,
    Verdict,
    affected,
    should_restart,
    signal_name,
)

P, T, TMP = RestartType.PERMANENT, RestartType.TRANSIENT, RestartType.TEMPORARY
CRASH = Exit(ExitReason.EXIT, code=1)
CLEAN = Exit(ExitReason.EXIT, code=0)
KILLED = Exit(ExitReason.SIGNAL, signal=signal.SIGKILL)
HUNG = Exit(ExitReason.HUNG, signal=signal.SIGKILL)
SHUTDOWN = Exit(ExitReason.SHUTDOWN, signal=signal.SIGTERM)
TREE = [("a", P), ("b", P), ("c", P), ("d", P)]


# -- Exit --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("returncode", "hung", "shutdown", "expected"), [
    (0, False, False, Exit(ExitReason.EXIT, code=0)),
    (3, False, False, Exit(ExitReason.EXIT, code=3)),
    (-9, False, False, Exit(ExitReason.SIGNAL, signal=9)),
    (-15, False, False, Exit(ExitReason.SIGNAL, signal=15)),
    (-9, True, False, Exit(ExitReason.HUNG, signal=9)),
    (-9, True, True, Exit(ExitReason.HUNG, signal=9)),
    (-15, False, True, Exit(ExitReason.SHUTDOWN, signal=15)),
    (0, False, True, Exit(ExitReason.SHUTDOWN, code=0)),
    (1, False, True, Exit(ExitReason.SHUTDOWN, code=1)),
    # Found hung, but it exited by itself before the SIGKILL landed: what really happened.
    (0, True, False, Exit(ExitReason.EXIT, code=0)),
    (2, True, False, Exit(ExitReason.EXIT, code=2)),
])
def test_exit_from_returncode(returncode: int, hung: bool, shutdown: bool,
                              expected: Exit) -> None:
    assert Exit.from_returncode(returncode, hung=hung, shutdown=shutdown) == expected


@pytest.mark.parametrize(("exit_", "abnormal"), [
    (CLEAN, False), (CRASH, True), (Exit(ExitReason.EXIT, code=255), True),
    (KILLED, True), (Exit(ExitReason.SIGNAL, signal=signal.SIGTERM), True),
    (HUNG, True), (SHUTDOWN, False), (Exit(ExitReason.SHUTDOWN, code=0), False),
    (Exit(ExitReason.SHUTDOWN, signal=signal.SIGKILL), False),
])
def test_exit_abnormal(exit_: Exit, abnormal: bool) -> None:
    assert exit_.abnormal is abnormal


@pytest.mark.parametrize(("reason", "code", "signum"), [
    (ExitReason.EXIT, None, None), (ExitReason.EXIT, 0, 9), (ExitReason.EXIT, None, 9),
    (ExitReason.SIGNAL, 1, None), (ExitReason.HUNG, 0, None), (ExitReason.SHUTDOWN, None, None),
])
def test_exit_rejects_inconsistent_fields(reason: ExitReason, code: int | None,
                                          signum: int | None) -> None:
    with pytest.raises(ValueError):
        Exit(reason, code, signum)


def test_signal_names() -> None:
    assert KILLED.signal_name == "SIGKILL"
    assert CLEAN.signal_name is None
    assert signal_name(signal.SIGTERM) == "SIGTERM"
    assert signal_name(None) is None
    assert signal_name(200) == "200"  # not a signal Python names: still reported


# -- restart types -----------------------------------------------------------------------------

@pytest.mark.parametrize(("restart", "exit_", "expected"), [
    (P, CLEAN, True), (P, CRASH, True), (P, KILLED, True), (P, HUNG, True), (P, SHUTDOWN, True),
    (T, CLEAN, False), (T, CRASH, True), (T, KILLED, True), (T, HUNG, True),
    (T, SHUTDOWN, False),
    (TMP, CLEAN, False), (TMP, CRASH, False), (TMP, KILLED, False), (TMP, HUNG, False),
    (TMP, SHUTDOWN, False),
])
def test_should_restart(restart: RestartType, exit_: Exit, expected: bool) -> None:
    assert should_restart(restart, exit_) is expected


# -- intensity ---------------------------------------------------------------------------------

def test_intensity_defaults_are_otp_like() -> None:
    intensity = RestartIntensity()
    assert (intensity.max_restarts, intensity.period_s) == (5, 30.0)


def test_intensity_exceeded_after_more_than_max_in_period() -> None:
    intensity = RestartIntensity(max_restarts=3, period_s=10.0)
    assert [intensity.add(t) for t in (0.0, 1.0, 2.0)] == [1, 2, 3]
    assert not intensity.exceeded(2.0)
    assert intensity.add(3.0) == 4
    assert intensity.exceeded(3.0)


def test_intensity_window_slides() -> None:
    intensity = RestartIntensity(max_restarts=2, period_s=10.0)
    intensity.add(0.0)
    intensity.add(5.0)
    assert intensity.count(10.0) == 2  # exactly period_s ago still counts
    assert intensity.count(10.5) == 1
    assert intensity.add(12.0) == 2
    assert not intensity.exceeded(12.0)
    assert intensity.add(14.0) == 3
    assert intensity.exceeded(14.0)
    assert intensity.count(100.0) == 0


def test_intensity_zero_gives_up_at_first_restart() -> None:
    intensity = RestartIntensity(max_restarts=0, period_s=1.0)
    intensity.add(0.0)
    assert intensity.exceeded(0.0)


def test_intensity_reset() -> None:
    intensity = RestartIntensity(1, 10.0)
    intensity.add(0.0)
    intensity.add(0.0)
    intensity.reset()
    assert intensity.count(0.0) == 0


@pytest.mark.parametrize(("max_restarts", "period_s"), [(-1, 1.0), (1, 0.0), (1, -5.0)])
def test_intensity_rejects_bad_limits(max_restarts: int, period_s: float) -> None:
    with pytest.raises(ValueError):
        RestartIntensity(max_restarts, period_s)


@given(
    max_restarts=st.integers(0, 6),
    period_s=st.floats(0.5, 50.0),
    gaps=st.lists(st.floats(0.0, 20.0), max_size=30),
)
def test_intensity_matches_a_reference_model(max_restarts: int, period_s: float,
                                             gaps: list[float]) -> None:
    intensity = RestartIntensity(max_restarts, period_s)
    now, times = 0.0, []
    for gap in gaps:
        now += gap
        times.append(now)
        expected = sum(1 for t in times if now - t <= period_s)
        assert intensity.add(now) == expected
        assert intensity.exceeded(now) is (expected > max_restarts)


# -- strategies --------------------------------------------------------------------------------

def test_affected_sets() -> None:
    names = ["a", "b", "c", "d"]
    assert affected(names, Strategy.ONE_FOR_ONE, "b") == ("b",)
    assert affected(names, Strategy.REST_FOR_ONE, "b") == ("b", "c", "d")
    assert affected(names, Strategy.REST_FOR_ONE, "d") == ("d",)
    assert affected(names, Strategy.REST_FOR_ONE, "a") == ("a", "b", "c", "d")
    assert affected(names, Strategy.ONE_FOR_ALL, "c") == ("a", "b", "c", "d")


def test_one_for_one_restarts_only_the_exited_child() -> None:
    decision = RestartPolicy().decide(TREE, "b", KILLED, now=0.0)
    assert decision == Decision(Verdict.RESTART, "b", decision.why, stop=(), start=("b",),
                                remove=(), restarts_in_period=1)


def test_rest_for_one_stops_later_children_in_reverse_then_starts_in_order() -> None:
    decision = RestartPolicy(Strategy.REST_FOR_ONE).decide(TREE, "b", CRASH, now=0.0)
    assert decision.verdict is Verdict.RESTART
    assert decision.stop == ("d", "c")
    assert decision.start == ("b", "c", "d")


def test_one_for_all_stops_every_other_child_in_reverse_then_starts_all_in_order() -> None:
    decision = RestartPolicy(Strategy.ONE_FOR_ALL).decide(TREE, "c", HUNG, now=0.0)
    assert decision.verdict is Verdict.RESTART
    assert decision.stop == ("d", "b", "a")
    assert decision.start == ("a", "b", "c", "d")


def test_group_restart_drops_temporary_siblings_and_restarts_transient_ones() -> None:
    tree = [("a", P), ("t", TMP), ("u", T), ("d", P)]
    decision = RestartPolicy(Strategy.ONE_FOR_ALL).decide(tree, "d", CRASH, now=0.0)
    assert decision.stop == ("u", "t", "a")
    assert decision.start == ("a", "u", "d")
    assert decision.remove == ("t",)


def test_transient_child_exiting_normally_is_not_restarted() -> None:
    policy = RestartPolicy(Strategy.ONE_FOR_ALL)
    decision = policy.decide([("a", P), ("t", T)], "t", CLEAN, now=0.0)
    assert decision.verdict is Verdict.NONE
    assert (decision.stop, decision.start, decision.remove) == ((), (), ())
    assert policy.intensity.count(0.0) == 0  # no restart, nothing counted


def test_transient_child_exiting_abnormally_is_restarted() -> None:
    for exit_ in (CRASH, KILLED, HUNG):
        decision = RestartPolicy().decide([("t", T)], "t", exit_, now=0.0)
        assert decision.verdict is Verdict.RESTART
        assert decision.start == ("t",)


def test_temporary_child_is_never_restarted_and_leaves_the_tree() -> None:
    for exit_ in (CLEAN, CRASH, KILLED, HUNG):
        decision = RestartPolicy(Strategy.ONE_FOR_ALL).decide(
            [("a", P), ("t", TMP)], "t", exit_, now=0.0)
        assert decision.verdict is Verdict.NONE
        assert decision.remove == ("t",)
        assert decision.stop == decision.start == ()


def test_permanent_child_exiting_normally_is_restarted() -> None:
    assert RestartPolicy().decide(TREE, "a", CLEAN, now=0.0).verdict is Verdict.RESTART


def test_intensity_exceeded_stops_the_whole_tree_in_reverse_order() -> None:
    policy = RestartPolicy(Strategy.ONE_FOR_ONE, RestartIntensity(max_restarts=2, period_s=5.0))
    verdicts = [policy.decide(TREE, "b", CRASH, now=t).verdict for t in (0.0, 1.0, 2.0)]
    assert verdicts == [Verdict.RESTART, Verdict.RESTART, Verdict.STOP_TREE]
    last = policy.decide(TREE, "b", CRASH, now=3.0)
    assert last.verdict is Verdict.STOP_TREE
    assert last.stop == ("d", "c", "a")
    assert last.start == ()
    assert "restarts within 5s" in last.why


def test_restarts_spread_over_time_never_stop_the_tree() -> None:
    policy = RestartPolicy(intensity=RestartIntensity(max_restarts=2, period_s=5.0))
    for i in range(50):
        decision = policy.decide(TREE, "a", KILLED, now=i * 3.0)
        assert decision.verdict is Verdict.RESTART
        assert decision.restarts_in_period <= 2


def test_one_group_restart_counts_once() -> None:
    policy = RestartPolicy(Strategy.ONE_FOR_ALL, RestartIntensity(max_restarts=1, period_s=10))
    assert policy.decide(TREE, "a", CRASH, now=0.0).restarts_in_period == 1


def test_decide_rejects_unknown_child_and_duplicate_names() -> None:
    with pytest.raises(ValueError):
        RestartPolicy().decide(TREE, "zz", CRASH, now=0.0)
    with pytest.raises(ValueError):
        RestartPolicy().decide([("a", P), ("a", T)], "a", CRASH, now=0.0)


# -- the decision, exhaustively ----------------------------------------------------------------

exits = st.one_of(
    st.integers(0, 255).map(lambda code: Exit(ExitReason.EXIT, code=code)),
    st.sampled_from([signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGABRT]).map(
        lambda s: Exit(ExitReason.SIGNAL, signal=int(s))),
    st.just(HUNG),
    st.just(SHUTDOWN),
)


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, RestartType]]:
    n = draw(st.integers(1, 7))
    types = draw(st.lists(st.sampled_from(list(RestartType)), min_size=n, max_size=n))
    return [(f"c{i}", t) for i, t in enumerate(types)]


@given(tree=trees(), strategy=st.sampled_from(list(Strategy)), data=st.data(), exit_=exits,
       max_restarts=st.integers(0, 4))
def test_decision_invariants(tree: list[tuple[str, RestartType]], strategy: Strategy,
                             data: st.DataObject, exit_: Exit, max_restarts: int) -> None:
    names = [n for n, _ in tree]
    types = dict(tree)
    exited = data.draw(st.sampled_from(names))
    intensity = RestartIntensity(max_restarts, 10.0)
    before = intensity.count(0.0)
    decision = RestartPolicy(strategy, intensity).decide(tree, exited, exit_, now=0.0)

    assert decision.exited == exited
    assert exited not in decision.stop  # it is already gone
    if not should_restart(types[exited], exit_):
        assert decision.verdict is Verdict.NONE
        assert decision.stop == decision.start == ()
        assert decision.remove == ((exited,) if types[exited] is TMP else ())
        assert intensity.count(0.0) == before
        return
    assert decision.restarts_in_period == before + 1
    if decision.verdict is Verdict.STOP_TREE:
        assert decision.restarts_in_period > max_restarts
        assert decision.stop == tuple(n for n in reversed(names) if n != exited)
        assert decision.start == ()
        return
    assert decision.verdict is Verdict.RESTART
    assert decision.restarts_in_period <= max_restarts
    group = affected(names, strategy, exited)
    # Stops: every other child of the group, in reverse start order.
    assert decision.stop == tuple(n for n in reversed(group) if n != exited)
    # Starts: the group in start order, minus temporary children, which are dropped instead.
    assert decision.start == tuple(n for n in group if types[n] is not TMP)
    assert decision.remove == tuple(n for n in group if types[n] is TMP)
    assert exited in decision.start
    assert [names.index(n) for n in decision.start] == sorted(names.index(n)
                                                              for n in decision.start)
    if strategy is Strategy.ONE_FOR_ONE:
        assert decision.start == (exited,)
        assert decision.stop == ()
    # Children outside the group are untouched.
    untouched = set(names) - set(group)
    assert untouched.isdisjoint(decision.stop + decision.start + decision.remove)


@given(tree=trees(), strategy=st.sampled_from(list(Strategy)),
       crashes=st.lists(st.tuples(st.integers(0, 6), st.floats(0.0, 3.0)), max_size=40))
def test_stop_tree_iff_reference_window_overflows(
        tree: list[tuple[str, RestartType]], strategy: Strategy,
        crashes: list[tuple[int, float]]) -> None:
    policy = RestartPolicy(strategy, RestartIntensity(max_restarts=3, period_s=5.0))
    names = [n for n, _ in tree]
    now, restarts = 0.0, []
    for index, gap in crashes:
        now += gap
        exited = names[index % len(names)]
        decision = policy.decide(tree, exited, KILLED, now)
        if dict(tree)[exited] is TMP:
            assert decision.verdict is Verdict.NONE
            continue
        restarts.append(now)
        in_window = sum(1 for t in restarts if now - t <= 5.0)
        expected = Verdict.STOP_TREE if in_window > 3 else Verdict.RESTART
        assert decision.verdict is expected
