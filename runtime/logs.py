"""Structured logging for every process: one line per record, the process named in each."""

from __future__ import annotations

import os
import sys

from loguru import logger


def setup_logging(name: str, level: str = "INFO") -> None:
    """Log to stderr as ``time level name[pid] message``; JSON lines when ``LEA_LOG_JSON=1``."""
    logger.remove()
    logger.configure(extra={"proc": name})
    if os.environ.get("LEA_LOG_JSON") == "1":
        logger.add(sys.stderr, level=level, serialize=True)
        return
    logger.add(
        sys.stderr,
        level=level,
        format="{time:YYYY-MM-DD HH:mm:ss.SSS} {level: <7} {extra[proc]}[{process}] {message}",
    )
