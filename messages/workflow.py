"""The workflow DSL: a workflow is a JSON file holding a list of actions
(``run.py workflow schema``; docs/protocol.md)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from messages.base import is_plain_json
from messages.inputs import INPUT_NAME, InputSpec, placeholders
from messages.monitor import MAX_MONITORS, Monitor
from messages.outputs import output_name, read_text_spec

ActionType = Literal[
    "click", "double_click", "right_click", "type", "key_combo", "scroll", "wait",
    "verify_screen", "pause_for_human", "read_text",
]

# Types whose double execution has side effects (docs/architecture.md): an orphan given up on
# one of these pauses the replay; the others are logged and the replay goes on.
CRITICAL_TYPES: frozenset[str] = frozenset(
    {"click", "double_click", "right_click", "type", "key_combo"}
)

# Types that act on a monitor: the monitor router says which one before each dispatch.
SCREEN_TYPES: frozenset[str] = CRITICAL_TYPES | {"scroll", "verify_screen", "read_text"}
# Types that send input to the workstation: the agent claims each attempt of one from the
# dispatcher before any input, so a copy that is no longer current never runs
# (agent/protocol/serve.py).
INPUT_TYPES: frozenset[str] = CRITICAL_TYPES | {"scroll"}

ACTION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class TargetSpec(_Strict):
    """How the agent finds what to act on."""

    by_text: str | None = None
    near_text: str | None = None
    """With ``by_text``: the text on the same row, or the heading above, that says which
    of several identical controls (docs/grounding.md, "Which row")."""
    vlm_description: str | None = None
    anchor_image_base64: str | None = None
    resolve_order: list[str] = Field(default_factory=list)
    window_title: str | None = None
    uia_target: dict[str, Any] | None = None
    x_pct: float | None = Field(None, ge=0.0, le=1.0)
    y_pct: float | None = Field(None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _near_text_needs_by_text(self) -> TargetSpec:
        if self.near_text is not None and not (self.by_text and self.near_text.strip()):
            raise ValueError("target_spec.near_text says which of several controls read "
                             "by_text: it needs a by_text, and a text of its own")
        return self


def locates(spec: TargetSpec | None) -> bool:
    """Whether ``spec`` gives any way to find a target: an anchor image, a text or a
    description to look for, a UI Automation target, or a recorded position (both
    ``x_pct`` and ``y_pct``)."""
    return spec is not None and bool(
        spec.anchor_image_base64 or spec.by_text or spec.vlm_description or spec.uia_target
        or (spec.x_pct is not None and spec.y_pct is not None))


POINTER_TYPES: frozenset[str] = frozenset({"click", "double_click", "right_click"})


def unlocatable(actions: list[Action]) -> list[str]:
    """One line per input action that could not find where to act: a click of any kind
    with no way to locate its target (:func:`locates`), or an input whose ``target_spec``
    locates nothing (without one, typing and keys go where the focus is)."""
    return [f"{a.action_id}: a {a.type} with no way to locate its target (no "
            "anchor_image_base64, no by_text / vlm_description, no x_pct + y_pct)"
            for a in actions if a.type in INPUT_TYPES and not locates(a.target_spec)
            and (a.type in POINTER_TYPES or a.target_spec is not None)]


SafetyLevel = Literal["standard", "medical_critical"]


class DeclaredCheck(_Strict):
    """One check of ``pause_for_human.parameters.safety_checks`` (docs/screens-and-pauses.md).

    ``required`` must be a real boolean: ``"false"`` silently turning a check optional (or
    the reverse) is not something a checklist may guess."""

    id: str = Field(pattern=ACTION_ID.pattern)
    label: str = Field(min_length=1, max_length=500)
    required: StrictBool = True

    @field_validator("label")
    @classmethod
    def _not_blank(cls, label: str) -> str:
        if not label.strip():
            raise ValueError("a check's label must not be blank")
        return label


class PauseSafety(BaseModel):
    """The optional safety fields of a pause_for_human's parameters (docs/screens-and-pauses.md);
    its other parameters (``message``, ...) are not looked at here."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    safety_level: SafetyLevel | None = None
    safety_checks: list[DeclaredCheck] | None = Field(None, max_length=50)

    @model_validator(mode="after")
    def _unique_check_ids(self) -> PauseSafety:
        seen: set[str] = set()
        for i, check in enumerate(self.safety_checks or []):
            if check.id in seen:
                raise ValueError(f"safety_checks[{i}].id {check.id!r} is not unique")
            seen.add(check.id)
        return self


def pause_safety_problems(parameters: dict[str, Any]) -> list[str]:
    """Why a pause_for_human's ``safety_level`` / ``safety_checks`` are not the spec's shape."""
    try:
        PauseSafety.model_validate(parameters)
    except ValidationError as exc:
        return [_where(err["loc"]) + err["msg"].removeprefix("Value error, ")
                for err in exc.errors()]
    return []


def _where(loc: tuple[int | str, ...]) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{path}: " if path else ""


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
    monitor_index: int | None = Field(None, ge=0, lt=MAX_MONITORS)
    """The recorded monitor's idx (messages/monitor.py); beyond what any workstation has it
    could only be refused at the replay (docs/screens-and-pauses.md): refused here."""
    monitor_geometry: Monitor | None = None
    """The recorded monitor (its entry of the recording agent's ``monitors_geometry``), so the
    router finds the same physical screen even if the layout changed (messages/monitor.py)."""
    from_node: str | None = None

    @field_validator("parameters")
    @classmethod
    def _json_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        # JSON values only: a workflow is a JSON file, and the dispatcher stores and audits
        # it as JSON (bytes, which msgpack can carry, made it fail with an internal error).
        if not is_plain_json(value):
            raise ValueError("parameters must hold JSON values only (no bytes, no NaN)")
        return value

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
        if self.type == "read_text":
            try:
                read_text_spec(p)
            except ValidationError as exc:
                raise ValueError("a 'read_text' action's parameters: " + "; ".join(
                    _where(err["loc"]) + err["msg"].removeprefix("Value error, ")
                    for err in exc.errors())) from None
        return self

    @property
    def critical(self) -> bool:
        return self.type in CRITICAL_TYPES


class SetupSpec(_Strict):
    """Open the application the workflow needs first, through the Start menu, with the
    guarded chain of workflow/setup_chain.py: the dispatcher puts those steps in
    front of the workflow's own when the replay starts."""

    app_name: str = Field(min_length=1, max_length=200)
    search_mode: Literal["click_then_type", "direct_typing"] = "click_then_type"
    source_window_title: str | None = Field(None, max_length=500)
    app_window_titles: list[str] | None = Field(None, max_length=20)
    language: Literal["fr", "en"] = "fr"
    monitor_index: int | None = Field(None, ge=0, lt=MAX_MONITORS)


class Workflow(_Strict):
    """A named, ordered list of actions; action ids are unique."""

    workflow_id: str = Field(pattern=ACTION_ID.pattern)
    name: str = ""
    description: str = ""
    setup: SetupSpec | None = None  # steps generated before the actions (setup_chain.py)
    inputs: list[InputSpec] = Field(default_factory=list, max_length=100)
    """What each run is given, used as ``{{name}}`` in the actions (messages/inputs.py)."""
    actions: list[Action] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _placeholders_declared(self) -> Workflow:
        # An undeclared placeholder would be typed as is, braces and all, into a record.
        names = [i.name for i in self.inputs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"inputs declared more than once: {', '.join(twice)}")
        problems: list[str] = []
        read: dict[str, int] = {}  # output -> the step reading it
        for i, a in enumerate(self.actions):
            where = f"actions[{i}]"
            for path, name in placeholders(a.model_dump(mode="json", exclude_none=True)):
                output = output_name(name)
                if output is not None:
                    # A value is used only once a step before has read it (docs/protocol.md,
                    # "Outputs"): never typed from a reading still to come.
                    if output not in read:
                        problems.append(f"{where}.{path} (action_id {a.action_id!r}): "
                                        f"{{{{{name}}}}} is not an output read by an "
                                        "earlier read_text step")
                elif name not in names:
                    problems.append(f"{where}.{path} (action_id {a.action_id!r}): "
                                    f"{{{{{name}}}}} is " + (
                                        "not a declared input" if INPUT_NAME.match(name)
                                        else "not an input name (a-z, 0-9, _)"))
            if a.type == "read_text":
                output = str(a.parameters["output"])
                if output in read:
                    problems.append(f"{where}.parameters.output (action_id {a.action_id!r}): "
                                    f"{output!r} is already read by actions[{read[output]}]")
                read.setdefault(output, i)
        if problems:
            raise ValueError("; ".join(problems[:20]))
        return self

    @model_validator(mode="after")
    def _unique_ids(self) -> Workflow:
        seen: dict[str, int] = {}
        for i, action in enumerate(self.actions):
            if action.action_id in seen:
                # Same notation as the field errors (cli/workflow_cmd.py: ``describe``): actions[i].
                raise ValueError(f"actions[{i}].action_id {action.action_id!r} is not unique"
                                 f" (also actions[{seen[action.action_id]}])")
            seen[action.action_id] = i
        return self

    @model_validator(mode="after")
    def _pause_safety_fits_the_spec(self) -> Workflow:
        # Checked on the workflow, where authors' files come in: a misspelt safety_level
        # would silently skip the contextual checks. A lone Action stays lenient (the
        # dispatcher normalises what it gets and never drops a check).
        for i, action in enumerate(self.actions):
            if action.type != "pause_for_human" and not (
                    {"safety_level", "safety_checks"} & action.parameters.keys()):
                continue
            problems = pause_safety_problems(action.parameters)
            if problems:
                raise ValueError(f"actions[{i}].parameters (action_id {action.action_id!r}): "
                                 + "; ".join(problems))
        return self

