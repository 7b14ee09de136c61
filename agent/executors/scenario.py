"""How the simulated executor misbehaves for a test: a small JSON "scenario" file.

Example (every key optional)::

    {
      "desktop": {"window_title": "Dossier patient — Easily",
                  "widgets": [{"name": "Valider", "kind": "button",
                               "x": 0.7, "y": 0.8, "w": 0.25, "h": 0.1}],
                  "monitors": [{"x": 0, "y": 0, "w": 1920, "h": 1080, "primary": true},
                               {"x": -1280, "y": 0, "w": 1280, "h": 1024}],
                  "focused_monitor": 1},
      "actions": {"step_2": {"fail": "target_not_found", "times": 2},
                  "step_5": {"system_dialog": "uac_consent"},
                  "step_7": {"delay_s": 60},
                  "step_9": {"crash": "after"}},
      "types":   {"scroll": {"loop": true}},
      "default": {"delay_s": 0.2}
    }

A rule is found for an action by, in order: its ``action_id``; its id without the
``_retry<N>`` / ``_resume`` / ``_resume<N>`` suffixes (so a business retry or a second
resume of ``step_2`` obeys ``step_2``'s rule); its type; ``default``. What a rule does:

- ``delay_s``: sleep that long first (a hang, or a slow screen); then whatever else applies.
- ``fail``: report ``success: false`` with that error (``target_not_found``, ...), no input.
- ``system_dialog``: a system dialog (``uac_consent``, ``credui``, ``smartscreen``) blocks
  the action: error ``system_dialog:<category>``, ``needs_human``, no input.
- ``wrong_window``: error and warning ``wrong_window``, no input.
- ``loop``: the input is performed but changes nothing on screen (loop detector fodder).
- ``crash``: ``"before"`` or ``"after"`` the input (and its effects-log line): the process
  ends at once with :data:`CRASH_EXIT_CODE`, as a power cut would.
- ``times``: the rule applies to its first N matching actions (counted per rule, per
  process), then the action behaves normally. Absent: always.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from messages.workflow import Action, ActionType

CRASH_EXIT_CODE = 97
"""Exit status of a scenario crash (distinct from the usual 1/2, to read in logs)."""

_SUFFIX = re.compile(r"(_retry\d+|_resume\d*)$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Behaviour(_Strict):
    """What to do instead of, or on top of, performing an action."""

    fail: str | None = Field(None, min_length=1, max_length=200)
    system_dialog: str | None = Field(None, min_length=1, max_length=64)
    wrong_window: bool = False
    loop: bool = False
    crash: Literal["before", "after"] | None = None
    fail_after_input: str | None = Field(None, min_length=1, max_length=200)
    """The input is performed, then the step fails with this error (a capture that fails
    right after a click: the lock screen came up)."""
    raise_in_input: bool = False
    """The call that sends the input raises once the input is out: the agent cannot tell."""
    delay_s: float = Field(0.0, ge=0.0, le=3600.0)
    times: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_kind(self) -> Behaviour:
        kinds = [self.fail is not None, self.system_dialog is not None, self.wrong_window,
                 self.loop, self.crash is not None, self.fail_after_input is not None,
                 self.raise_in_input]
        if sum(kinds) > 1:
            raise ValueError("a rule takes at most one of fail, system_dialog, wrong_window,"
                             " loop, crash, fail_after_input, raise_in_input")
        return self


class WidgetSpec(_Strict):
    """A widget of the simulated window; position and size are fractions of the screen."""

    name: str = Field(min_length=1, max_length=100)
    kind: Literal["button", "field", "label"] = "button"
    x: float = Field(ge=0.0, le=1.0)
    y: float = Field(ge=0.0, le=1.0)
    w: float = Field(0.2, gt=0.0, le=1.0)
    h: float = Field(0.1, gt=0.0, le=1.0)
    text: str = ""
    opens: str | None = Field(None, description="window title after a click on it")


DEFAULT_WIDGETS: tuple[WidgetSpec, ...] = (
    WidgetSpec(name="Imagerie", kind="button", x=0.05, y=0.15),
    WidgetSpec(name="Fermer", kind="button", x=0.75, y=0.15),
    WidgetSpec(name="Recherche", kind="field", x=0.05, y=0.32, w=0.6),
    WidgetSpec(name="Commentaire", kind="field", x=0.05, y=0.47, w=0.6),
    WidgetSpec(name="Valider", kind="button", x=0.7, y=0.75, w=0.25),
)


class MonitorSpec(_Strict):
    """A monitor the simulated desktop reports in its screen heartbeats (numbered by the
    agent's rule, agent/screen/geometry.py, whatever the order given here)."""

    x: int = Field(ge=-(1 << 20), le=1 << 20)
    y: int = Field(ge=-(1 << 20), le=1 << 20)
    w: int = Field(gt=0, le=1 << 20)
    h: int = Field(gt=0, le=1 << 20)
    primary: bool = False
    name: str | None = Field(None, max_length=128)


class DesktopSpec(_Strict):
    window_title: str = "Dossier patient — Easily"
    widgets: list[WidgetSpec] = Field(default_factory=lambda: list(DEFAULT_WIDGETS))
    monitors: list[MonitorSpec] = Field(
        default_factory=lambda: [MonitorSpec(x=0, y=0, w=320, h=200, primary=True,
                                             name="simulated")], max_length=16)
    """``[]``: the agent reports no geometry (as without screeninfo): composite routing."""
    focused_monitor: int | None = Field(0, ge=0, lt=16)
    """idx of the monitor holding the simulated window."""
    banner: str = Field("", max_length=500)
    """The patient banner's text, shown at the top of the window: what an identity check
    (verify_screen ``expect_text``) reads there. ``{typed}`` in it stands for the last text
    typed (a patient search opens that patient's record)."""
    clock: bool = False
    """A clock (HH:MM:SS, from 10:00:00) in the title bar that advances one second at every
    action, whatever the action does: a ``loop`` then changes nothing but the clock."""


class Scenario(_Strict):
    desktop: DesktopSpec = Field(default_factory=DesktopSpec)
    actions: dict[str, Behaviour] = Field(default_factory=dict)
    types: dict[ActionType, Behaviour] = Field(default_factory=dict)
    default: Behaviour | None = None

    def rule_for(self, action: Action) -> tuple[str, Behaviour] | None:
        """``(rule key, behaviour)`` that applies to ``action``, or None."""
        action_id = action.action_id
        if action_id in self.actions:
            return f"action:{action_id}", self.actions[action_id]
        base = action_id
        while (stripped := _SUFFIX.sub("", base)) != base:
            base = stripped
            if base in self.actions:
                return f"action:{base}", self.actions[base]
        if action.type in self.types:
            return f"type:{action.type}", self.types[action.type]
        if self.default is not None:
            return "default", self.default
        return None


class ScenarioError(ValueError):
    """A scenario file that cannot be read or does not validate."""


def load_scenario(path: str | Path) -> Scenario:
    """The scenario in ``path``; raises :class:`ScenarioError` with a readable message."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        return Scenario.model_validate(raw)
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"scenario {path} is not JSON: {exc}") from None
    except ValidationError as exc:
        raise ScenarioError(f"scenario {path} is invalid: {exc}") from None
