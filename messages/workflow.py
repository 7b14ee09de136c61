"""The workflow DSL: a workflow is a JSON file holding a list of actions (spec/03 §4.1)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ActionType = Literal[
    "click", "double_click", "right_click", "type", "key_combo", "scroll", "wait",
    "verify_screen", "pause_for_human",
]

# Types whose double execution has side effects (DESIGN.md §4, D2): an orphan given up on
# one of these pauses the replay; the others are logged and the replay goes on.
CRITICAL_TYPES: frozenset[str] = frozenset(
    {"click", "double_click", "right_click", "type", "key_combo"}
)

ACTION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetSpec(_Strict):
    """How the agent finds what to act on."""

    by_text: str | None = None
    vlm_description: str | None = None
    anchor_image_base64: str | None = None
    resolve_order: list[str] = Field(default_factory=list)
    window_title: str | None = None
    uia_target: dict[str, Any] | None = None
    x_pct: float | None = Field(None, ge=0.0, le=1.0)
    y_pct: float | None = Field(None, ge=0.0, le=1.0)


class Action(_Strict):
    """One workflow step."""

    action_id: str = Field(pattern=ACTION_ID.pattern)
    type: ActionType
    target_spec: TargetSpec | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    expected_window_before: str | None = None
    expected_window_title: str | None = None
    success_strict: bool = False
    intention: str | None = None
    monitor_index: int | None = None
    from_node: str | None = None

    @model_validator(mode="after")
    def _parameters_fit_type(self) -> Action:
        p = self.parameters
        if self.type == "type" and not isinstance(p.get("text"), str):
            raise ValueError("a 'type' action needs parameters.text (a string)")
        if self.type == "key_combo" and not (
            isinstance(p.get("keys"), list) and p["keys"]
            and all(isinstance(k, str) for k in p["keys"])
        ):
            raise ValueError("a 'key_combo' action needs parameters.keys (a list of strings)")
        if self.type == "wait":
            ms = p.get("duration_ms")
            if not isinstance(ms, int) or isinstance(ms, bool) or not 0 <= ms <= 3_600_000:
                raise ValueError("a 'wait' action needs parameters.duration_ms (0..3600000)")
        return self

    @property
    def critical(self) -> bool:
        return self.type in CRITICAL_TYPES


class Workflow(_Strict):
    """A named, ordered list of actions; action ids are unique."""

    workflow_id: str = Field(pattern=ACTION_ID.pattern)
    name: str = ""
    description: str = ""
    actions: list[Action] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _unique_ids(self) -> Workflow:
        seen: dict[str, int] = {}
        for i, action in enumerate(self.actions):
            if action.action_id in seen:
                # Same notation as the field errors (cli/workflow_cmd.describe): actions[i].
                raise ValueError(f"actions[{i}].action_id {action.action_id!r} is not unique"
                                 f" (also actions[{seen[action.action_id]}])")
            seen[action.action_id] = i
        return self
