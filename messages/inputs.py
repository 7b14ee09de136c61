"""A workflow's inputs: what one run of it is given (a patient's IPP, a date...), declared
once and used as ``{{name}}`` placeholders in its actions (docs/protocol.md, "Inputs")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool

INPUT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
"""``{{name}}``; what is inside is checked against :data:`INPUT_NAME` by the workflow."""

InputType = Literal["string", "integer", "date"]


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern is not a regular expression: {exc}") from None
    return pattern


Regex = Annotated[str, Field(max_length=500), AfterValidator(_compiles)]
"""A regular expression a whole value must match (an input's, an output's)."""


class InputSpec(BaseModel):
    """One declared input. ``pattern``: a regular expression the whole value must match.
    ``sensitive``: the value is never shown in logs, events, audit records nor to a
    console viewer (masked as :data:`MASK`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str = Field(pattern=INPUT_NAME.pattern)
    type: InputType = "string"
    pattern: Regex | None = None
    required: StrictBool = True
    sensitive: StrictBool = False
    description: str = Field("", max_length=500)


MASK = "•••"
"""What a sensitive value is replaced with wherever it would be shown."""

# Fields of an action that are never templates: ids, the kind, images, geometry.
_NOT_TEMPLATES = frozenset({"action_id", "type", "anchor_image_base64", "monitor_geometry",
                            "monitor_index", "from_node", "x_pct", "y_pct", "success_strict"})


def template_fields(action: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field path, text)`` of every string of an action (as a JSON dict) that may hold
    placeholders: typed text, targets, checks, messages, labels, window titles."""

    def walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
        if isinstance(value, str):
            yield path, value
        elif isinstance(value, dict):
            for key, item in value.items():
                if not (key in _NOT_TEMPLATES and path in ("", "target_spec")):
                    yield from walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from walk(item, f"{path}[{i}]")

    yield from walk(action, "")


def placeholders(action: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field path, name)`` of every placeholder of an action (as a JSON dict)."""
    for path, text in template_fields(action):
        for match in PLACEHOLDER.finditer(text):
            yield path, match.group(1)
