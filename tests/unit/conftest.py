"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.dispatcher_db import Reopen


@pytest.fixture(params=["sqlite", "postgresql"])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Reopen:
    """The dispatcher store's contract holds on both databases (actors/dispatcher/store/open.py
    chooses one)."""
    if request.param == "sqlite":
        return Reopen(str(tmp_path / "d.sqlite3"))
    return Reopen(request.getfixturevalue("pg_url"))


@pytest.fixture(scope="module")
def read() -> Iterator[Any]:
    """The agent's Tesseract reader (agent/grounding/tesseract.py), loaded once a module."""
    pytest.importorskip("tesserocr")
    from agent.grounding.tesseract import TesseractReader

    reader = TesseractReader()
    try:
        yield reader.read
    finally:
        reader.close()
