"""The loop detector on the simulated agent's own frames, as the dispatcher would feed it:
a ``loop`` scenario (inputs change nothing; with ``desktop.clock`` the clock still ticks)
pauses at step N (N + 1 with a clock ticking from the first step: the simulated agent
reports no focus, so a ``type`` without a target is judged on the whole screen, where the
clock's first ticks light up new tiles; steps with a point ignore the clock, which ticks
away from where they act), the same workflow done for real never."""

from __future__ import annotations

import time
from typing import Any

import pytest

from actors.loop_detector.config import LoopConfig
from actors.loop_detector.core import LoopDetectorCore
from actors.loop_detector.pixel import PixelEmbedder
from agent.executors.scenario import Scenario
from agent.executors.simulated import SimulatedExecutor
from messages.dispatch import DispatchAction, DispatchMeta
from messages.loop import LoopVerdict, ObserveStep
from messages.workflow import Action

N = LoopConfig().screen_static_n

WORKFLOW: list[dict[str, Any]] = [
    {"type": "click", "target_spec": {"by_text": "Recherche"}},
    {"type": "type", "target_spec": {"by_text": "Recherche"}, "parameters": {"text": "Dupont"}},
    {"type": "click", "target_spec": {"by_text": "Commentaire"}},
    {"type": "type", "parameters": {"text": "IRM genou"}},
    {"type": "key_combo", "parameters": {"keys": ["ctrl", "s"]}},
    {"type": "click", "target_spec": {"by_text": "Valider"}},
    {"type": "click", "target_spec": {"by_text": "Imagerie"}},
    {"type": "type", "target_spec": {"by_text": "Recherche"}, "parameters": {"text": " Jean"}},
]


def replay(scenario: dict[str, Any]) -> list[LoopVerdict]:
    """Each step executed by the simulated agent, then observed as the dispatcher does."""
    executor = SimulatedExecutor(Scenario.model_validate(scenario), sleep=lambda _s: None)
    core = LoopDetectorCore(LoopConfig(), PixelEmbedder())
    verdicts = []
    for i, fields in enumerate(WORKFLOW):
        action = Action.model_validate({"action_id": f"step_{i}", **fields})
        outcome = executor.execute(DispatchAction(
            replay_id="r", session_id="s", machine_id="M1", action=action, attempt_id=f"t{i}",
            dispatch_meta=DispatchMeta(first_dispatched_at=time.time())), None)
        verdicts.append(core.observe(ObserveStep(
            replay_id="r", session_id="s", action_id=action.action_id,
            base_action_id=action.action_id, action_type=action.type,
            target=action.target_spec.model_dump(mode="json") if action.target_spec else None,
            parameters=dict(action.parameters), actual_position=outcome.actual_position,
            success=outcome.success, error=outcome.error, warning=outcome.warning,
            screenshot_after=outcome.screenshot_after)).verdict)
    return verdicts


@pytest.mark.parametrize("clock", [False, True])
def test_the_workflow_done_for_real_never_pauses(clock: bool) -> None:
    assert not any(v.detected for v in replay({"desktop": {"clock": clock}}))


@pytest.mark.parametrize(("clock", "pause_at"), [(False, N), (True, N + 1)])
def test_a_looping_agent_pauses_within_n_steps(clock: bool, pause_at: int) -> None:
    verdicts = replay({"desktop": {"clock": clock}, "default": {"loop": True}})
    detected = [i + 1 for i, v in enumerate(verdicts) if v.detected]
    assert detected[0] == pause_at  # the step count (1-based) at which the pause comes
    assert verdicts[pause_at - 1].signal == "screen_static"
