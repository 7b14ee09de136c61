"""The read_text step, for every executor: what the screen shows where the step looks (the
OCR grounding on a real screen, the simulated desktop's text), judged by
workflow/outputs.py (docs/protocol.md, "Outputs").

Fail closed: nothing read, a label not found or found twice, a value that does not fit
the step's pattern: the step fails ``output_invalid`` with ``needs_human``, the replay
pauses, and no later step is given a wrong value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PIL import Image
from pydantic import ValidationError

from agent.executors.base import ActionOutcome
from agent.executors.desktop_text import TextSettings
from agent.executors.identity import Unreadable, lines
from agent.grounding.beside import value_beside
from messages.outputs import MAX_OUTPUT, ReadText, read_text_spec
from workflow.outputs import OUTPUT_INVALID, clean, value_problem


def read_output(parameters: dict[str, Any], read: Callable[[ReadText], str],
                method: str | None = None) -> ActionOutcome:
    """Success with ``output_value`` when what ``read`` returns fits the step; else
    ``output_invalid`` with why (and what was read, the dispatcher masks it if the output
    is sensitive)."""
    try:
        spec = read_text_spec(parameters)
    except ValidationError as exc:
        return ActionOutcome.failure(f"invalid_parameters:{exc.errors()[0]['msg']}"[:300],
                                     needs_human=True)
    try:
        value = clean(read(spec))
    except Unreadable as exc:
        return ActionOutcome.failure(OUTPUT_INVALID, needs_human=True,
                                     target_description=str(exc)[:300],
                                     resolution_method=method)
    problem = value_problem(spec, value)
    if problem is not None:
        return ActionOutcome.failure(OUTPUT_INVALID, needs_human=True,
                                     target_description=problem, resolution_method=method,
                                     output_value=value[:MAX_OUTPUT + 1] or None)
    return ActionOutcome(success=True, output_value=value, resolution_method=method)


def ocr_read(image: Image.Image, text: TextSettings) -> Callable[[ReadText], str]:
    """What the OCR reads in ``image`` (the routed monitor, captured now): the step's
    region of it, or the text beside its label (in its region if it has one)."""

    def read(spec: ReadText) -> str:
        if text.read is None:
            raise Unreadable(f"écran illisible : {text.unavailable}")
        shot = image if spec.region is None else image.crop(spec.region.box(*image.size))
        words = text.read(shot)
        if spec.label is None:
            return lines(words)
        found = value_beside(words, spec.label, spec.direction, text.min_score, text.margin)
        if found.value is None:
            raise Unreadable(found.error or "nothing read")
        return found.value

    return read

