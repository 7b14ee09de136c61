"""The history check (tests/history.py) on a real tree: it finds the trail and the effects
log of what the test started, and reports a history that breaks a property."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Spawn
from tests.history import DOUBLE_INPUT, NOT_EXACTLY_ONCE
from tests.history_sources import judge, watch
from tests.integration.system import System, clicks, workflow


@pytest.mark.history_breaks(DOUBLE_INPUT, NOT_EXACTLY_ONCE, reason=(
    "its agent's effects log is written twice, as if a second agent had performed every "
    "input again: the check must report each step"))
def test_an_effects_log_written_twice_breaks_the_history(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("h1")
    rid = system.start(workflow(*clicks(3)), "h1")
    system.wait_status(rid, "completed", timeout=60)
    w = watch(request.node)
    assert list(w.logs) == [agent.effects_path.resolve()]
    assert [t.data_dir for t in w.trails] == [(tmp_path / "var").resolve()]
    clean = judge(w)
    assert (clean.findings, clean.replays, clean.inputs) == ([], 1, 3)

    lines = agent.effects_path.read_bytes()
    with agent.effects_path.open("ab") as log:
        log.write(lines)
    verdict = judge(w)
    assert {(f.prop, f.replay_id, f.step) for f in verdict.findings} == {
        (prop, rid, step) for prop in (DOUBLE_INPUT, NOT_EXACTLY_ONCE)
        for step in ("s0", "s1", "s2")}
    double = next(f for f in verdict.findings if f.prop == DOUBLE_INPUT and f.step == "s1")
    assert "action s1 performed 2 times" in double.account
    assert "effects.jsonl:2 " in double.account and "effects.jsonl:5 " in double.account
