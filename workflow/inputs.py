"""A run's input values: checked against the workflow's declaration, put into its actions
where they are used, masked wherever they would be shown (docs/protocol.md, "Inputs").

Pure functions; the dispatcher checks the values before creating a replay and substitutes
them when it builds each dispatch, so the workflow it keeps (and stores) has placeholders.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, TypeVar

from pydantic import BaseModel

from messages.inputs import MASK, PLACEHOLDER, InputSpec, placeholders
from messages.workflow import Action, Workflow

MAX_VALUE = 2000
"""The longest value accepted (a typed note); longer is refused, not cut."""

M = TypeVar("M", bound=BaseModel)


def value_problems(declared: list[InputSpec], values: dict[str, str]) -> list[str]:
    """Why ``values`` do not satisfy the declaration, one line per field; [] when they do.
    A value never appears in a line when its input is sensitive."""
    by_name = {i.name: i for i in declared}
    problems = [f"{name}: not a declared input" for name in values if name not in by_name]
    for spec in declared:
        value = values.get(spec.name)
        if value is None or value == "":
            if spec.required:
                problems.append(f"{spec.name}: required, not given")
            continue
        shown = MASK if spec.sensitive else repr(value)
        why = _type_problem(spec, value)
        if why is None and spec.pattern is not None and not re.fullmatch(spec.pattern, value):
            why = f"does not match the pattern {spec.pattern!r}"
        if why is None and (len(value) > MAX_VALUE or any(
                ord(c) < 32 and c not in "\n\t" for c in value)):
            why = f"longer than {MAX_VALUE} characters or holds control characters"
        if why is not None:
            problems.append(f"{spec.name}: {shown} {why}")
    return problems


def _type_problem(spec: InputSpec, value: str) -> str | None:
    if spec.type == "integer" and not re.fullmatch(r"-?[0-9]+", value):
        return "is not an integer"
    if spec.type == "date":
        try:
            dt.date.fromisoformat(value)
        except ValueError:
            return "is not a date (YYYY-MM-DD)"
    return None


def unused(workflow: Workflow) -> list[str]:
    """The declared inputs no action uses (a warning: a mistyped placeholder elsewhere?)."""
    used = {name for a in workflow.actions
            for _path, name in placeholders(a.model_dump(mode="json", exclude_none=True))}
    return [i.name for i in workflow.inputs if i.name not in used]


def fill(text: str, values: dict[str, str]) -> str:
    """``text`` with each ``{{name}}`` replaced by its value (absent: the empty string,
    for an optional input not given)."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), ""), text)


def _fill_any(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return fill(value, values) if "{{" in value else value
    if isinstance(value, dict):
        return {k: _fill_any(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_any(v, values) for v in value]
    return value


def substitute(action: Action, values: dict[str, str]) -> Action:
    """``action`` with its placeholders replaced by ``values`` (itself when it has none)."""
    data = action.model_dump(mode="json", exclude_none=True)
    if not any(True for _ in placeholders(data)):
        return action
    keep = {k: data[k] for k in ("action_id", "type") if k in data}
    return Action.model_validate({**_fill_any(data, values), **keep})


def shown_values(declared: list[InputSpec], values: dict[str, str]) -> dict[str, str]:
    """The values as a person may see them: a sensitive one is :data:`MASK`."""
    secret = {i.name for i in declared if i.sensitive}
    return {k: (MASK if k in secret else v) for k, v in values.items()}


def secrets(declared: list[InputSpec], values: dict[str, str]) -> list[str]:
    """The sensitive values to mask in what an agent reports, longest first (so that a
    value holding another is masked whole)."""
    secret = {i.name for i in declared if i.sensitive}
    found = {v for k, v in values.items() if k in secret and v}
    return sorted(found, key=len, reverse=True)


def mask(value: Any, hidden: list[str]) -> Any:
    """``value`` (any JSON-like data) with every occurrence of a hidden string masked."""
    if not hidden:
        return value
    if isinstance(value, str):
        for secret in hidden:
            value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {k: mask(v, hidden) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, hidden) for v in value]
    return value


def mask_model(message: M, hidden: list[str]) -> M:
    """A copy of ``message`` whose strings have every hidden string masked (bytes, the
    screenshots, stay as they are: docs/protocol.md, "Inputs")."""
    if not hidden:
        return message
    data = message.model_dump(mode="python")
    masked = mask(data, hidden)
    return message if masked == data else type(message).model_validate(masked)
