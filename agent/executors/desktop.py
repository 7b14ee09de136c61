"""The real-screen executor: mss capture, pyautogui mouse and keyboard, one monitor at a time.

Each action runs on one area: the monitor the dispatcher attached (``monitor_resolution``),
else the agent's monitor ``action.monitor_index``, else the composite (desktop_target.py).
The target pixel is found on that area's pixels only (anchor template matching or
``x_pct / y_pct``) and offset into absolute desktop coordinates before any input. A target
that is not found is never clicked somewhere else: ``target_not_found``.

Reports carry ``screenshot_before`` / ``screenshot_after`` of the area (desktop_frames.py),
``actual_position`` (``x_pct / y_pct`` of the area, plus absolute ``x, y``), the resolution
method, score and time, and ``no_screen_change`` when a click changed nothing visible
(skipped for ``parameters._setup_phase`` steps: their verify_screen guards decide,
docs/screens-and-pauses.md). verify_screen title guards and the human-correction mode:
window_guard.py.

Safety: pyautogui's fail-safe stays on. A person who pushes the mouse into a screen corner
stops the current action; it is reported as ``failsafe_triggered`` with ``needs_human``
(the replay pauses), never as a crash. Our own moves never end exactly on a corner pixel.

Windows DPI: :func:`agent.screen.geometry.ensure_dpi_awareness` runs before pyautogui is
imported, so capture, monitor geometry and input all use physical pixels on mixed-DPI
screens (pyautogui alone would make the process system-aware only). Tested under Wine. If
Windows refused it and a monitor is scaled for the agent, no click, scroll or targeted
typing is sent: ``display_scaling_mismatch`` with ``needs_human`` (docs/windows-scaling.md).

Fail closed: before any input the window in front must be known. With no foreground window
(Windows: the UAC secure desktop, the lock screen; X11: no window manager and no focused
named window), or one whose title cannot be read, nothing is sent: the step reports
``system_dialog:<category>`` with ``needs_human`` and the dispatcher pauses the replay
(docs/screens-and-pauses.md, "The desktop executor").
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from loguru import logger

from agent.effects import EffectsLog, InputTracker
from agent.executors.base import ActionOutcome, ExecutorUnavailable
from agent.executors.desktop_config import ConfigError, DesktopConfig
from agent.executors.desktop_frames import action_site, encode_screenshot, screen_changed
from agent.executors.desktop_keys import InputSpecError, normalise_keys, typing_runs
from agent.executors.desktop_target import (
    MONITOR_UNAVAILABLE,
    Area,
    blind_elsewhere,
    resolve_point,
    routed_here,
    target_area,
)
from agent.executors.desktop_text import Resolved, TextSettings
from agent.executors.identity import check_identity, ocr_reader
from agent.executors.read_text import ocr_read, read_output
from agent.executors.window_guard import (
    WINDOW_CHECK_S,
    WRONG_WINDOW,
    GuardSpecError,
    check_window,
    guard_patterns,
    guard_timeout_s,
    read_until,
    title_after,
    title_mismatch,
)
from agent.grounding.tesseract import OcrUnavailable, TesseractReader
from agent.screen import geometry
from agent.screen.capture import CaptureError, Screen, Shot
from agent.screen.dpi import input_refusal
from agent.screen.probe import DesktopProbe
from messages.dispatch import ActionSite, DispatchAction
from messages.monitor import Monitor, MonitorResolution
from messages.workflow import Action

POINTER = {"click": ("left", 1), "double_click": ("left", 2), "right_click": ("right", 1)}
SETUP_SETTLE_S = 0.5
"""After a ``_setup_phase`` click: a fixed settle instead of the pixel-change test."""
CHANGE_POLL_S = 0.05
CLIPBOARD_TRIES, CLIPBOARD_WAIT_S = 100, 0.02
"""How long a text put in the clipboard may take to read back (2 s) before typing fails."""
BLOCKERS = {
    geometry.NO_FOREGROUND_WINDOW: "no window is in front (a secure desktop such as a UAC "
                                   "prompt or the lock screen, or no window manager)",
    geometry.UNTITLED_FOREGROUND_WINDOW: "the window in front has no readable title",
    geometry.FOREGROUND_UNREADABLE: "the window in front cannot be read",
}
"""What the person is told when the window in front is unknown (fail closed)."""
DISPLAY_SCALING = "display_scaling_mismatch"
"""The error when Windows would scale the agent's clicks (fail closed, agent/screen/dpi.py)."""
FAILSAFE_MESSAGE = ("the mouse was pushed into a corner of the screen (pyautogui fail-safe):"
                    " the person at the workstation stopped Léa")


class _Effects:
    """The attempt's inputs (:class:`~agent.effects.InputTracker`: the effects log and the
    report's ``input_performed``), and where the input went (``site``, read just before it:
    the loop detector judges progress there)."""

    def __init__(self, dispatch: DispatchAction, log: EffectsLog | None) -> None:
        self.inputs = InputTracker(dispatch, log)
        self.site: ActionSite | None = None
        self.routed: MonitorResolution | None = None  # found here (desktop_target.routed_here)

    def locate(self, area: Area) -> None:
        self.site = action_site(area.rect, geometry.active_window_rect(),
                                geometry.focus_rect())

    @property
    def done(self) -> bool:
        return self.inputs.performed

    def sending(self) -> AbstractContextManager[None]:
        return self.inputs.sending()


class DesktopExecutor:
    """Performs actions on the real screen (module docstring); one action at a time."""

    name = "desktop"

    def __init__(self, config: DesktopConfig | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
            raise ExecutorUnavailable("the desktop executor needs a screen: DISPLAY is not set")
        try:
            self.config = config or DesktopConfig.from_env()
        except ConfigError as exc:
            raise ExecutorUnavailable(f"invalid desktop executor setting: {exc}") from exc
        geometry.ensure_dpi_awareness()  # before pyautogui: it would pin system-aware DPI
        try:
            import pyautogui
        except Exception as exc:  # no display, no Xlib, no library
            raise ExecutorUnavailable(f"pyautogui cannot start: {exc}") from exc
        _same_display(pyautogui)
        pyautogui.FAILSAFE = True
        pyautogui.PAUSE = self.config.input_pause_s
        self.gui: Any = pyautogui
        self.screen = Screen()
        try:
            desktop = self.screen.desktop()
        except CaptureError as exc:
            raise ExecutorUnavailable(str(exc)) from exc
        self._sleep, self._clock = sleep, clock
        self._lock = threading.Lock()
        self._ocr: TextSettings | None = None  # loaded at the first text target
        self.on_progress: Callable[[DispatchAction, dict[str, Any]], None] | None = None
        """Set by the agent: called from the execution thread when a guard starts waiting
        for a person (``{"state": "awaiting_human_correction", ...}``)."""
        logger.info("desktop executor ready: desktop {}, monitors {}", desktop,
                    [m.rect for m in geometry.monitors_geometry()])

    # The action ------------------------------------------------------------------------------

    def execute(self, dispatch: DispatchAction, effects: EffectsLog | None) -> ActionOutcome:
        """The outcome says whether an input went out (``input_performed``), whatever
        failed and whenever: a capture that fails after a click (the lock screen coming up)
        must not make the click look undone."""
        fx = _Effects(dispatch, effects)
        with self._lock:
            try:
                outcome = self._execute(dispatch, fx)
            except self.gui.FailSafeException:
                logger.warning("{}: {}", dispatch.action.action_id, FAILSAFE_MESSAGE)
                outcome = ActionOutcome.failure("failsafe_triggered", needs_human=True,
                                                target_description=FAILSAFE_MESSAGE)
            except CaptureError as exc:
                outcome = ActionOutcome.failure(f"capture_failed: {exc}"[:300])
            except Exception as exc:  # C1, with what is known of the input
                logger.exception("the desktop executor failed on {}",
                                 dispatch.action.action_id)
                outcome = ActionOutcome.failure(
                    f"executor_error:{type(exc).__name__}: {exc}"[:300])
        return replace(outcome, input_performed=fx.inputs.state, monitor_resolution=fx.routed)

    def _execute(self, dispatch: DispatchAction, fx: _Effects) -> ActionOutcome:
        action = dispatch.action
        if action.type == "pause_for_human":
            return ActionOutcome.failure("unsupported_action_type:pause_for_human")
        area = self._area(dispatch, fx)
        refused = area.error or blind_elsewhere(action, area)
        if refused is not None:  # the router refused the screen, or nobody can find it
            logger.warning("{}: not performed: {}", action.action_id, refused)
            return ActionOutcome.failure(MONITOR_UNAVAILABLE, needs_human=True,
                                         target_description=refused)
        before = self.screen.grab(area.rect)
        if before.rect != area.rect:
            return ActionOutcome.failure(
                "monitor_unavailable", needs_human=False,
                target_description=f"monitor {area.idx} {area.rect} is not (wholly) on the "
                                   f"desktop {self.screen.desktop()} any more")
        if action.type == "wait":
            self._sleep(int(action.parameters["duration_ms"]) / 1000.0)
            return self._frames(ActionOutcome(success=True), before, self.screen.grab(area.rect))
        if action.type == "verify_screen":
            outcome = self._verify(dispatch)
            after = self.screen.grab(area.rect)
            if outcome.success and "expect_text" in action.parameters:
                # Read once the window guard passed: the patient's identity (OCR).
                outcome = check_identity(action.parameters,
                                         ocr_reader(after.image, self._text()), "ocr")
            return self._frames(outcome, before, after)
        refusal = self._front_refusal(action) or self._scaling_refusal(action)
        if refusal is not None:
            return self._frames(refusal, before, before)
        if action.type == "read_text":
            # Read once the window in front is known (and the expected one, if named): a
            # value read from another window would be another record's (docs/protocol.md,
            # "Outputs").
            outcome = read_output(action.parameters, ocr_read(before.image, self._text()), "ocr")
            return self._frames(outcome, before, before)
        if action.type in POINTER:
            outcome = self._pointer(action, area, before, fx)
        elif action.type == "type":
            outcome = self._type(action, area, before, fx)
        elif action.type == "key_combo":
            fx.locate(area)
            outcome = self._keys(action, fx)
        else:
            outcome = self._scroll(action, area, before, fx)
        if not fx.done:  # refused before any input: the screen is as it was
            return self._frames(outcome, before, before)
        setup = bool(action.parameters.get("_setup_phase"))
        after, changed = self._after(area, before, setup)
        if outcome.success and action.type in POINTER and not changed and not setup:
            outcome = replace(outcome, warning="no_screen_change")
        if fx.site is not None:
            outcome = replace(outcome, site=fx.site)
        outcome = title_after(outcome, action, geometry.active_window_title, self._clock,
                              self._sleep)
        return self._frames(outcome, before, after)

    def capture(self, monitor_index: int | None, recorded: Monitor | None) -> tuple[bytes, int]:
        """A fresh capture of the monitor a pause is about (the composite if it names none),
        for the safety checks' model; ``(image, monitor idx)``. Called from the agent's main
        loop: Screen is thread-safe, and no input is sent."""
        monitors = (geometry.monitors_geometry()
                    if monitor_index is not None or recorded is not None else [])
        area = target_area(None, monitor_index, monitors, self.screen.desktop(), recorded)
        if area.error is not None:
            raise CaptureError(area.error)
        return encode_screenshot(self.screen.grab(area.rect).image, self.config), area.idx

    def _area(self, dispatch: DispatchAction, fx: _Effects) -> Area:
        res, action = dispatch.monitor_resolution, dispatch.action
        index, recorded = action.monitor_index, action.monitor_geometry
        monitors = []
        if dispatch.agent_routes:  # the router's rule on the screen as it is now
            monitors = geometry.monitors_geometry()
            res = fx.routed = routed_here(dispatch, monitors, DesktopProbe().focus(monitors)[0])
        elif (index is not None or recorded is not None) and (
                res is None or res.idx < 0 or res.w <= 0 or res.h <= 0):
            monitors = geometry.monitors_geometry()
        return target_area(res, index, monitors, self.screen.desktop(), recorded)

    def _front_refusal(self, action: Action) -> ActionOutcome | None:
        """Why no input may be sent now (module docstring), or None: the window in front
        is still unknown after WINDOW_CHECK_S (a system dialog; for a moment after an input
        it often is), or is not ``expected_window_before``."""
        front = read_until(geometry.foreground, lambda f: f.blocker is None, WINDOW_CHECK_S,
                           self._clock, self._sleep)
        if front.blocker is not None:
            reason = BLOCKERS.get(front.blocker, front.blocker)
            logger.warning("{}: no input sent, {}", action.action_id, reason)
            return ActionOutcome.failure(
                f"system_dialog:{front.blocker}", needs_human=True, target_description=reason,
                system_dialog={"category": front.blocker, "matched_signal": "foreground_window",
                               "matched_value": front.title, "reason": reason,
                               "context": "desktop_executor"})
        expected = action.expected_window_before
        if not expected:
            return None
        why = title_mismatch(action, "expected_window_before", expected, front.title)
        if why is None:
            return None
        return ActionOutcome.failure(WRONG_WINDOW, warning=WRONG_WINDOW, target_description=why)

    def _scaling_refusal(self, action: Action) -> ActionOutcome | None:
        """No input at a point where Windows would scale it away from the aim (Windows refused
        per-monitor DPI awareness and a monitor is scaled for this process, or the scaling
        cannot be read: agent/screen/dpi.py); keys alone go to the focus and may go."""
        if action.type not in POINTER and action.type != "scroll" and not (
                action.type == "type" and self._targets(action)):
            return None
        reading = geometry.dpi_reading()
        why = input_refusal(reading) if reading is not None else (
            "the display scaling cannot be read" if sys.platform == "win32" else None)
        if why is None:
            return None
        logger.warning("{}: no input sent, {}", action.action_id, why)
        return ActionOutcome.failure(DISPLAY_SCALING, needs_human=True, target_description=why)

    # Inputs ----------------------------------------------------------------------------------

    def _find(self, action: Action, area: Area, before: Shot) -> Resolved:
        spec = action.target_spec
        text = self._text() if spec is not None and spec.by_text else None
        return resolve_point(spec, before.image, (before.x, before.y), area.rect,
                             self.config.anchor_scales, self.config.anchor_min_score, text)

    def _text(self) -> TextSettings:
        """The OCR reader, loaded once (it takes a second or two); if it cannot load, why:
        a text target is then not found, never clicked elsewhere."""
        if self._ocr is None:
            c = self.config
            try:
                reader = TesseractReader(c.ocr_langs, c.ocr_tessdata)
            except OcrUnavailable as exc:
                logger.error("text targets cannot be read on this agent: {}", exc)
                self._ocr = TextSettings(None, c.ocr_min_score, c.ocr_margin, str(exc))
            else:
                logger.info("OCR ready: Tesseract {} ({})", reader.version, c.ocr_langs)
                self._ocr = TextSettings(reader.read, c.ocr_min_score, c.ocr_margin,
                                         read_many=reader.read_many)
        return self._ocr

    def _not_found(self, action: Action, found: Resolved) -> ActionOutcome:
        spec = action.target_spec
        described = (spec.by_text or spec.vlm_description) if spec else None
        warnings = {"target_not_found": "visual_resolve_failed",
                    "ambiguous_target": "ambiguous_target"}
        return ActionOutcome.failure(
            found.error or "target_not_found", warning=warnings.get(found.error or ""),
            target_description="; ".join(p for p in (described, found.detail) if p) or None,
            target_spec=spec, resolution_method=found.method,
            resolution_score=found.score, resolution_elapsed_ms=found.elapsed_ms)

    def _resolved_fields(self, found: Resolved, area: Area) -> dict[str, Any]:
        assert found.x is not None and found.y is not None
        x0, y0, w, h = area.rect
        return {"actual_position": {"x_pct": round((found.x - x0) / w, 5),
                                    "y_pct": round((found.y - y0) / h, 5),
                                    "x": float(found.x), "y": float(found.y)},
                "resolution_method": found.method, "resolution_score": found.score,
                "resolution_elapsed_ms": found.elapsed_ms,
                "resolution_box": None if found.box is None else dict(
                    zip(("x", "y", "w", "h"), map(float, found.box), strict=True)),
                "target_description": found.detail}

    def _safe(self, x: int, y: int) -> tuple[int, int]:
        """Never end a move on a fail-safe corner: one pixel inwards clicks the same thing."""
        if (x, y) in self.gui.FAILSAFE_POINTS:
            return x + (1 if x <= 0 else -1), y + (1 if y <= 0 else -1)
        return x, y

    def _locate(self, action: Action, area: Area, before: Shot
                ) -> tuple[int, int, dict[str, Any]] | ActionOutcome:
        """The target's point on ``area`` (safe from the fail-safe corners) and its report
        fields, or the outcome to report when it is not found."""
        found = self._find(action, area, before)
        if not found.found:
            return self._not_found(action, found)
        assert found.x is not None and found.y is not None
        x, y = self._safe(found.x, found.y)
        return x, y, self._resolved_fields(found, area)

    @staticmethod
    def _targets(action: Action) -> bool:
        spec = action.target_spec
        return spec is not None and bool(spec.anchor_image_base64 or spec.by_text or
                                         spec.x_pct is not None)

    def _pointer(self, action: Action, area: Area, before: Shot, fx: _Effects) -> ActionOutcome:
        located = self._locate(action, area, before)
        if isinstance(located, ActionOutcome):
            return located
        x, y, fields = located
        button, clicks = POINTER[action.type]
        fx.locate(area)
        with fx.sending():
            self.gui.click(x, y, clicks=clicks, interval=0.05, button=button)
        return ActionOutcome(success=True, **fields)

    def _type(self, action: Action, area: Area, before: Shot, fx: _Effects) -> ActionOutcome:
        text = str(action.parameters["text"])
        try:
            runs = typing_runs(text, self._typeable())
        except InputSpecError as exc:
            return ActionOutcome.failure(f"invalid_parameters:{exc}")
        if any(not typed for typed, _run in runs):
            clipboard = _clipboard()
            if clipboard is None:
                return ActionOutcome.failure(
                    "untypeable_text", target_description="the text has characters no key "
                    "types and the clipboard is not usable (Linux: install xclip)")
            # The whole text in one paste: the application reads the clipboard when it gets
            # to the Ctrl+V, maybe much later on a busy workstation, and any later write to
            # the clipboard (the next run, or the old content put back) would be pasted
            # instead. Seen under load: "Hélène" typed with the previous content. And in
            # the clipboard before any input: if it cannot be, nothing has been touched.
            runs = [(False, text)]
            if not self._to_clipboard(clipboard, text):
                return ActionOutcome.failure(
                    "untypeable_text", target_description="the clipboard did not take the "
                    "text (its content could not be read back)")
        fields: dict[str, Any] = {}
        if self._targets(action):
            located = self._locate(action, area, before)
            if isinstance(located, ActionOutcome):
                return located
            x, y, fields = located
            with fx.sending():
                self.gui.click(x, y)
        fx.locate(area)  # after the click that gave the focus, before the first key
        if action.parameters.get("clear_first"):
            with fx.sending():
                self.gui.hotkey("ctrl", "a")
                self.gui.press("delete")
        for typed, run in runs:
            with fx.sending():
                if typed:
                    self.gui.write(run, interval=self.config.type_interval_s)
                else:  # the whole text, already in the clipboard (_to_clipboard)
                    self.gui.hotkey("ctrl", "v")
        return ActionOutcome(success=True, **fields)

    def _typeable(self) -> set[str]:
        mapping = getattr(self.gui.platformModule, "keyboardMapping", {})
        return {k for k in self.gui.KEYBOARD_KEYS if len(k) == 1 and mapping.get(k) is not None}

    def _to_clipboard(self, clipboard: Any, text: str) -> bool:
        """Put ``text`` in the clipboard, and wait until it reads back: on X11 the copy
        returns before the new owner (xclip) serves it, and a Ctrl+V then pasted nothing.
        The clipboard keeps it (see _type: nothing may be written to it after the Ctrl+V,
        the person's old content is not put back)."""
        clipboard.copy(text)
        for _ in range(CLIPBOARD_TRIES):
            try:
                if clipboard.paste() == text:
                    return True
            except Exception:
                logger.debug("the clipboard could not be read back yet")
            self._sleep(CLIPBOARD_WAIT_S)
        return False

    def _keys(self, action: Action, fx: _Effects) -> ActionOutcome:
        try:
            keys = normalise_keys(list(action.parameters["keys"]), self.gui.KEYBOARD_KEYS)
        except InputSpecError as exc:
            return ActionOutcome.failure(f"invalid_parameters:{exc}")
        with fx.sending():
            self.gui.hotkey(*keys)
        return ActionOutcome(success=True)

    def _scroll(self, action: Action, area: Area, before: Shot, fx: _Effects) -> ActionOutcome:
        p = action.parameters
        delta = p.get("delta", p.get("clicks", -3))
        if not isinstance(delta, int) or isinstance(delta, bool) or not -100 <= delta <= 100:
            return ActionOutcome.failure("invalid_parameters:scroll needs an integer delta "
                                         "(-100..100)")
        fields: dict[str, Any] = {}
        if self._targets(action):
            located = self._locate(action, area, before)
            if isinstance(located, ActionOutcome):
                return located
            x, y, fields = located
        else:  # the wheel goes to the window under the pointer: keep it on the area
            x0, y0, w, h = area.rect
            px, py = self.gui.position()
            x, y = (px, py) if x0 <= px < x0 + w and y0 <= py < y0 + h else \
                self._safe(x0 + w // 2, y0 + h // 2)
        fx.locate(area)
        with fx.sending():
            self.gui.scroll(delta, x=x, y=y)
        return ActionOutcome(success=True, **fields)

    # Observation -----------------------------------------------------------------------------

    def _verify(self, dispatch: DispatchAction) -> ActionOutcome:
        action = dispatch.action
        duration = action.parameters.get("duration_ms")
        try:
            patterns = guard_patterns(action)
            guard_s = guard_timeout_s(action)
        except GuardSpecError as exc:
            return ActionOutcome.failure(f"invalid_parameters:{exc}")
        if isinstance(duration, int) and not isinstance(duration, bool) and \
                0 < duration <= 3_600_000:
            self._sleep(duration / 1000.0)
        if not patterns:
            return ActionOutcome(success=True)
        progress = self.on_progress
        return check_window(patterns, geometry.active_window_title, guard_s,
                            self.config.correction_timeout_s, self._clock, self._sleep,
                            None if progress is None else lambda info: progress(dispatch, info))

    def _after(self, area: Area, before: Shot, setup: bool) -> tuple[Shot, bool]:
        """The area after an input, and whether it changed (polled up to the timeout)."""
        if setup:
            self._sleep(SETUP_SETTLE_S)
            return self.screen.grab(area.rect), True
        deadline = self._clock() + self.config.screen_change_timeout_s
        while True:
            self._sleep(CHANGE_POLL_S)
            after = self.screen.grab(area.rect)
            if screen_changed(before.image, after.image):
                return after, True
            if self._clock() >= deadline:
                return after, False

    def _frames(self, outcome: ActionOutcome, before: Shot, after: Shot) -> ActionOutcome:
        return replace(outcome, screenshot_before=encode_screenshot(before.image, self.config),
                       screenshot_after=encode_screenshot(after.image, self.config))

    def close(self) -> None:
        self.screen.close()
        if self._ocr is not None and self._ocr.read is not None:
            reader = getattr(self._ocr.read, "__self__", None)
            if isinstance(reader, TesseractReader):
                reader.close()


def _same_display(pyautogui: Any) -> None:
    """pyautogui connects to X once, at import: refuse to run against another display."""
    conn = getattr(getattr(pyautogui, "platformModule", None), "_display", None)
    wanted = os.environ.get("DISPLAY")
    if conn is None or wanted is None:
        return
    name = conn.get_display_name()
    if name != wanted:
        raise ExecutorUnavailable(f"pyautogui is bound to display {name} in this process, "
                                  f"not {wanted}")


def _clipboard() -> Any:
    """pyperclip if it can reach a clipboard here, else None."""
    try:
        import pyperclip

        pyperclip.paste()
    except Exception:
        return None
    return pyperclip
