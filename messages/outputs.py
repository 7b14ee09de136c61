"""A workflow's outputs: a ``read_text`` step reads a text from the screen (a region of the
routed monitor, or beside a label) into a named output of the run; later steps use it as
``{{outputs.name}}`` (docs/protocol.md, "Outputs")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from messages.inputs import INPUT_NAME, Regex

OUTPUTS_PREFIX = "outputs."
"""A placeholder naming an output: ``{{outputs.sejour}}``, beside the inputs' ``{{ipp}}``."""
MAX_OUTPUT = 500
"""The longest value an output keeps; a longer reading is refused, not cut."""


class Region(BaseModel):
    """A part of the routed monitor, in fractions of it (0..1 from its top-left corner),
    so that it holds wherever the monitor stands on the desktop, negative origins too."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    x_pct: float = Field(ge=0.0, lt=1.0)
    y_pct: float = Field(ge=0.0, lt=1.0)
    w_pct: float = Field(gt=0.0, le=1.0)
    h_pct: float = Field(gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _inside(self) -> Region:
        if self.x_pct + self.w_pct > 1.0 + 1e-9 or self.y_pct + self.h_pct > 1.0 + 1e-9:
            raise ValueError("region must lie within the monitor (x_pct + w_pct <= 1, "
                             "y_pct + h_pct <= 1)")
        return self

    def box(self, width: int, height: int) -> tuple[int, int, int, int]:
        """``(left, top, right, bottom)`` in the pixels of a monitor of that size."""
        return (round(self.x_pct * width), round(self.y_pct * height),
                max(round((self.x_pct + self.w_pct) * width), round(self.x_pct * width) + 1),
                max(round((self.y_pct + self.h_pct) * height), round(self.y_pct * height) + 1))


class ReadText(BaseModel):
    """The parameters of a ``read_text`` step. ``output``: the name the value is kept under.
    ``region``: where to read; ``label``: read the text beside this one (``direction``
    ``right``: the rest of its row, ``below``: the line under it), within ``region`` if
    both are given. ``pattern``: a regular expression the whole value must match.
    ``sensitive``: the value is masked wherever it would be shown, as a sensitive input."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    output: str = Field(pattern=INPUT_NAME.pattern)
    region: Region | None = None
    label: str | None = Field(None, min_length=1, max_length=200)
    direction: Literal["right", "below"] = "right"
    pattern: Regex | None = None
    sensitive: StrictBool = False
    description: str = Field("", max_length=500)

    @model_validator(mode="after")
    def _somewhere(self) -> ReadText:
        # A whole monitor's text is no value: the step says where it stands.
        if self.region is None and not (self.label and self.label.strip()):
            raise ValueError("a read_text step needs a region, a label, or both")
        return self


def read_text_spec(parameters: dict[str, Any]) -> ReadText:
    """The parameters of a read_text step, validated (ValueError, pydantic's, if not)."""
    return ReadText.model_validate(parameters)


def output_name(placeholder: str) -> str | None:
    """The output a placeholder's inside names (``outputs.sejour`` -> ``sejour``), or None
    when it names an input."""
    if placeholder.startswith(OUTPUTS_PREFIX):
        return placeholder[len(OUTPUTS_PREFIX):]
    return None
