"""A logged exception shows where it happened, never the values of its local variables
(docs/operations.md, "Logs"): they hold typed text, inputs and audit records."""

from __future__ import annotations

from pathlib import Path

import pytest
from loguru import logger

from runtime.logs import setup_logging

MARKER = "DUPONT-4242"


def _types(text: str) -> None:
    typed = f"Nom {text}"  # a local an exception's traceback would show with diagnose on
    raise ValueError(f"the field refused {len(typed)} characters")


def test_a_logged_exception_carries_no_local_value(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_file = tmp_path / "logs" / "proc.log"
    setup_logging("proc", "INFO", log_file)
    try:
        try:
            _types(MARKER)
        except ValueError:
            logger.exception("typing failed")
        logger.complete()
    finally:
        logger.remove()
    written = log_file.read_text(encoding="utf-8")
    shown = capsys.readouterr().err
    for text in (written, shown):
        assert "typing failed" in text and "ValueError" in text and "_types" in text
        assert MARKER not in text
