"""The simulated executor: performs actions on an in-memory desktop
(agent/executors/simulated_desktop.py) and reports them with its PNG frames.

It lets the whole system run, and be tested, on a machine with no screen. How it misbehaves
on purpose is described in :mod:`agent.executors.scenario`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any

from agent.effects import EffectsLog, InputTracker
from agent.executors.base import ActionOutcome
from agent.executors.desktop_target import (
    MONITOR_UNAVAILABLE,
    blind_elsewhere,
    routed_here,
    target_area,
)
from agent.executors.identity import Unreadable, check_identity
from agent.executors.read_text import read_output
from agent.executors.scenario import CRASH_EXIT_CODE, Behaviour, Scenario
from agent.executors.simulated_desktop import DIALOG_TITLES, HEIGHT, WIDTH, SimulatedDesktop
from agent.executors.window_guard import title_after
from agent.screen.geometry import number_monitors
from agent.screen.raw_monitor import RawMonitor
from messages.dispatch import DispatchAction
from messages.monitor import Monitor, MonitorResolution
from messages.outputs import ReadText
from messages.workflow import INPUT_TYPES, Action
from workflow.identity import IdentityCheck


class SimulatedExecutor:
    """Performs actions on a :class:`SimulatedDesktop`, steered by a :class:`Scenario`.

    ``sleep`` and ``exit`` are injectable so unit tests neither wait nor die.
    """

    name = "simulated"

    def __init__(self, scenario: Scenario | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 exit: Callable[[int], Any] = os._exit) -> None:
        self.scenario = scenario or Scenario()
        self.desktop = SimulatedDesktop.from_spec(self.scenario.desktop)
        self._sleep = sleep
        self._exit = exit
        self._applied: dict[str, int] = {}
        spec = self.scenario.desktop
        self.monitors = number_monitors(
            RawMonitor(m.x, m.y, m.w, m.h, m.primary, m.name) for m in spec.monitors)
        """The simulated desktop's monitors, numbered as a real agent numbers its own."""
        self._lock = threading.Lock()  # one action at a time, even if misused from threads

    def _behaviour(self, action: Action) -> Behaviour | None:
        found = self.scenario.rule_for(action)
        if found is None:
            return None
        key, behaviour = found
        used = self._applied.get(key, 0)
        if behaviour.times is not None and used >= behaviour.times:
            return None
        self._applied[key] = used + 1
        return behaviour

    def capture(self, _monitor_index: int | None, _recorded: Monitor | None
                ) -> tuple[bytes, int]:
        """The simulated screen as it is now (one frame: the composite). Not under the
        execution lock: it is read from the agent's main loop while an action may run."""
        return self.desktop.render(), -1

    def execute(self, dispatch: DispatchAction, effects: EffectsLog | None) -> ActionOutcome:
        with self._lock:
            outcome = self._execute(dispatch, effects)
        if dispatch.agent_routes:  # say which monitor this agent found (desktop_target.py)
            outcome = replace(outcome, monitor_resolution=self._routed(dispatch))
        return outcome

    def _routed(self, dispatch: DispatchAction) -> MonitorResolution | None:
        """The resolution obeyed: the dispatcher's, or the router's rule on the simulated
        monitors and the scenario's focus (desktop_target.routed_here)."""
        focus = self.scenario.desktop.focused_monitor
        return routed_here(dispatch, self.monitors,
                           focus if any(m.idx == focus for m in self.monitors) else None)

    def _execute(self, dispatch: DispatchAction, effects: EffectsLog | None) -> ActionOutcome:
        action = dispatch.action
        behaviour = self._behaviour(action) or Behaviour()
        if self.desktop.clock is not None:
            self.desktop.clock += 1  # time passes between actions, not within one
        before = self.desktop.render()
        if behaviour.delay_s:
            self._sleep(behaviour.delay_s)
        refusal = self._off_screen(dispatch) or self._refusal(action, behaviour)
        if refusal is not None:  # nothing was sent
            return _with_frames(replace(refusal, input_performed="none"), before,
                                self.desktop.render())
        if behaviour.crash == "before":
            self._exit(CRASH_EXIT_CODE)
        started = time.perf_counter()
        inputs = InputTracker(dispatch, effects)
        outcome = self._perform(dispatch, inputs, behaviour)
        if behaviour.crash == "after":
            self._exit(CRASH_EXIT_CODE)
        if behaviour.fail_after_input is not None and inputs.performed:
            # What a capture failing right after a click looks like (the lock screen).
            outcome = ActionOutcome.failure(behaviour.fail_after_input)
        outcome = replace(outcome, input_performed=inputs.state)
        after = self.desktop.render()
        if outcome.success and action.type in ("click", "double_click", "right_click") \
                and after == before:
            outcome = replace(outcome, warning="no_screen_change")
        if action.type in INPUT_TYPES:
            outcome = title_after(outcome, action, lambda: self.desktop.window_title,
                                  timeout_s=0.0)  # the simulated desktop changes at once
        if outcome.resolution_method is not None:
            outcome = replace(outcome, resolution_elapsed_ms=round(
                (time.perf_counter() - started) * 1000, 3))
        return _with_frames(outcome, before, after)

    def _off_screen(self, dispatch: DispatchAction) -> ActionOutcome | None:
        """The desktop executor's monitor rule (desktop_target.py) on the simulated monitors:
        a monitor the action names that cannot be found is not stood in for."""
        action = dispatch.action
        area = target_area(self._routed(dispatch), action.monitor_index, self.monitors,
                           (0, 0, WIDTH, HEIGHT), action.monitor_geometry)
        refused = area.error or blind_elsewhere(action, area)
        if refused is None or action.type == "pause_for_human":
            return None
        return ActionOutcome.failure(MONITOR_UNAVAILABLE, needs_human=True,
                                     target_description=refused)

    def _refusal(self, action: Action, behaviour: Behaviour) -> ActionOutcome | None:
        """Why the action must not be performed at all, or None."""
        spec = action.target_spec
        description = (spec.by_text or spec.vlm_description) if spec else None
        if behaviour.system_dialog is not None:
            category = behaviour.system_dialog
            self.desktop.dialog = category
            return ActionOutcome.failure(
                f"system_dialog:{category}", needs_human=True, target_description=description,
                system_dialog={"category": category, "matched_signal": "window_title",
                               "matched_value": DIALOG_TITLES.get(category, category),
                               "reason": f"{category} prompt blocks the action",
                               "context": "simulated_executor"})
        if behaviour.wrong_window:
            return ActionOutcome.failure("wrong_window", warning="wrong_window",
                                         target_description=description)
        if behaviour.fail is not None:
            warning = "visual_resolve_failed" if behaviour.fail == "target_not_found" else None
            return ActionOutcome.failure(behaviour.fail, warning=warning,
                                         target_description=description, target_spec=spec)
        if self.desktop.dialog is not None:
            # A dialog raised earlier still covers the screen: nothing gets through.
            return ActionOutcome.failure(f"system_dialog:{self.desktop.dialog}",
                                         needs_human=True, target_description=description)
        expected = action.expected_window_before
        if expected and not self.desktop.title_matches([expected]):
            return ActionOutcome.failure("wrong_window", warning="wrong_window",
                                         target_description=description)
        if action.type == "pause_for_human":
            return ActionOutcome.failure("unsupported_action_type:pause_for_human")
        return None

    def _perform(self, dispatch: DispatchAction, inputs: InputTracker,
                 behaviour: Behaviour) -> ActionOutcome:
        action, desk, loop = dispatch.action, self.desktop, behaviour.loop
        p = action.parameters

        @contextmanager
        def sending() -> Iterator[None]:
            with inputs.sending():
                yield
                if behaviour.raise_in_input:
                    raise RuntimeError("the input call failed half-way (simulated)")

        if action.type in ("click", "double_click", "right_click"):
            return self._pointer(action, sending, loop)
        if action.type == "type":
            spec = action.target_spec
            if spec is not None and spec.by_text:
                field_ = desk.find(spec.by_text)
                if field_ is None or field_.kind != "field":
                    return _not_found(action)
                if not loop:
                    desk.focused = field_.name
            with sending():
                if not loop:
                    desk.type_text(str(p["text"]))
            return ActionOutcome(success=True)
        if action.type == "key_combo":
            with sending():
                if not loop:
                    desk.press([str(k) for k in p["keys"]])
            return ActionOutcome(success=True)
        if action.type == "scroll":
            delta = p.get("delta", p.get("clicks", -3))
            if not isinstance(delta, int) or isinstance(delta, bool):
                return ActionOutcome.failure("invalid_parameters:scroll needs an integer delta")
            with sending():
                if not loop:
                    desk.scroll_by(delta)
            return ActionOutcome(success=True)
        if action.type == "wait":
            self._sleep(int(p["duration_ms"]) / 1000.0)
            return ActionOutcome(success=True)
        if action.type == "read_text":
            return read_output(p, self._read, "simulated_text_match")
        # verify_screen: an observation, not an input (a window-title guard,
        # docs/screens-and-pauses.md).
        duration = p.get("duration_ms")
        if isinstance(duration, int) and not isinstance(duration, bool) and duration > 0:
            self._sleep(duration / 1000.0)
        patterns = p.get("expected_window_title_contains") or (
            [action.expected_window_title] if action.expected_window_title else [])
        if isinstance(patterns, str):
            patterns = [patterns]
        if patterns and not desk.title_matches([str(x) for x in patterns]):
            # No person to correct it in the simulation: the human-correction mode
            # ends as its timeout does, in a supervised pause.
            return ActionOutcome.failure(
                "window_title_mismatch", warning="setup_guard_window_mismatch",
                needs_human=True,
                target_description=f"expected a window title containing {patterns}, "
                                   f"got {desk.window_title!r}")
        return self._identity(p)

    def _identity(self, p: dict[str, Any]) -> ActionOutcome:
        """The identity check a verify_screen asks (workflow/identity.py): with a region,
        the banner is what is read there; without, the whole window's text."""
        desk = self.desktop

        def read(check: IdentityCheck) -> str:
            if check.region is not None:
                return desk.banner
            return "\n".join([desk.banner, desk.window_title,
                              *(f"{w.name} {w.text}" for w in desk.widgets)])

        return check_identity(p, read)

    def _read(self, spec: ReadText) -> str:
        """What a read_text step reads (workflow/outputs.py): beside a label, the text of
        the field of that name, else the banner's text after it up to a column gap (two
        spaces); with a region only, the banner."""
        desk = self.desktop
        if spec.label is None:
            return desk.banner
        widget = desk.find(spec.label)
        if widget is not None:
            return widget.text
        at = desk.banner.casefold().find(spec.label.strip().casefold())
        if at < 0:
            raise Unreadable(f"the label {spec.label!r} is not read on the screen")
        rest = desk.banner[at + len(spec.label.strip()):].lstrip(" :")
        return rest.split("  ")[0]

    def _pointer(self, action: Action, sending: Callable[[], AbstractContextManager[None]],
                 loop: bool) -> ActionOutcome:
        spec = action.target_spec
        widget = self.desktop.find(spec.by_text) if spec and spec.by_text else None
        if widget is not None:
            (x, y), method, score = widget.centre, "simulated_text_match", 1.0
        elif spec is not None and spec.x_pct is not None and spec.y_pct is not None:
            (x, y), method, score = (spec.x_pct, spec.y_pct), "position_fallback", 0.5
        else:
            return _not_found(action)
        with sending():
            if not loop:
                self.desktop.click(x, y, action.type)
        return ActionOutcome(success=True, actual_position={"x_pct": x, "y_pct": y},
                             resolution_method=method, resolution_score=score)

    def screen_probe(self) -> SimulatedProbe:
        """What the agent's screen heartbeats report (agent/screen/probe.py)."""
        return SimulatedProbe(self)

    def close(self) -> None:
        """Nothing to release."""


class SimulatedProbe:
    """The simulated desktop's monitors (from the scenario), focus and window title."""

    def __init__(self, executor: SimulatedExecutor) -> None:
        self._executor = executor
        self._focus = executor.scenario.desktop.focused_monitor

    def monitors(self) -> list[Monitor]:
        return list(self._executor.monitors)

    def focus(self, monitors: list[Monitor]) -> tuple[int | None, str | None]:
        # Read from the sampling thread; a str attribute is replaced whole, never torn.
        title = self._executor.desktop.window_title
        index = self._focus if any(m.idx == self._focus for m in monitors) else None
        return index, title


def _not_found(action: Action) -> ActionOutcome:
    spec = action.target_spec
    return ActionOutcome.failure(
        "target_not_found", warning="visual_resolve_failed", target_spec=spec,
        target_description=(spec.by_text or spec.vlm_description) if spec else None)


def _with_frames(outcome: ActionOutcome, before: bytes, after: bytes) -> ActionOutcome:
    return replace(outcome, screenshot_before=before, screenshot_after=after)
