"""A run's outputs: what its read_text steps read, judged against the step's declaration,
put into later steps as ``{{outputs.name}}``, masked wherever a sensitive one would be
shown (docs/protocol.md, "Outputs").

Pure functions: the agent reads the screen and judges what it read here; the dispatcher
judges the reported value again (it keeps only what fits) and substitutes it at dispatch.
"""

from __future__ import annotations

import re

from messages.inputs import MASK, placeholders
from messages.outputs import MAX_OUTPUT, OUTPUTS_PREFIX, ReadText, output_name, read_text_spec
from messages.workflow import Action, Workflow

OUTPUT_INVALID = "output_invalid"
"""The error (and pause reason) of a read_text step that read nothing, or a value that
does not fit its pattern: a business failure, the replay pauses for a person."""
OUTPUT_MISSING = "output_missing"
"""The pause reason of a step that uses an output no step has read in this run (a person
said a failed read_text step was done): nothing is typed from a value never read."""


def clean(text: str) -> str:
    """A reading as a value: its words joined by single spaces (OCR lines and columns)."""
    return " ".join(text.split())


def value_problem(spec: ReadText, value: str | None) -> str | None:
    """Why ``value`` (what was read) cannot be the output; None when it can. The value
    appears in the reason only when the output is not sensitive."""
    text = clean(value or "")
    if not text:
        return "nothing was read there"
    shown = MASK if spec.sensitive else repr(text[:200])
    if len(text) > MAX_OUTPUT or any(ord(c) < 32 for c in text):
        return f"{shown} is longer than {MAX_OUTPUT} characters or holds control characters"
    if spec.pattern is not None and not re.fullmatch(spec.pattern, text):
        return f"{shown} does not match the pattern {spec.pattern!r}"
    return None


def reads(workflow: Workflow) -> dict[str, ReadText]:
    """The outputs the workflow's read_text steps declare, by name."""
    specs = (read_text_spec(a.parameters) for a in workflow.actions if a.type == "read_text")
    return {s.output: s for s in specs}


def used(action: Action) -> list[str]:
    """The outputs ``action`` uses as placeholders, in order, once each."""
    names = (output_name(name) for _path, name in
             placeholders(action.model_dump(mode="json", exclude_none=True)))
    return list(dict.fromkeys(n for n in names if n is not None))


def as_values(outputs: dict[str, str]) -> dict[str, str]:
    """The outputs as placeholder values (``outputs.sejour``), beside the inputs'."""
    return {OUTPUTS_PREFIX + name: value for name, value in outputs.items()}


def shown_outputs(specs: dict[str, ReadText], outputs: dict[str, str]) -> dict[str, str]:
    """The outputs as a person may see them: a sensitive one (or one no step declares any
    more) is :data:`MASK`."""
    return {k: (v if k in specs and not specs[k].sensitive else MASK)
            for k, v in outputs.items()}


def secret_outputs(specs: dict[str, ReadText], outputs: dict[str, str]) -> list[str]:
    """The sensitive outputs' values, to mask in what an agent reports."""
    return [v for k, v in outputs.items() if v and (k not in specs or specs[k].sensitive)]
