"""Structured logging for every process: one line per record, the process named in each."""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from loguru import logger

LINE = "{time:YYYY-MM-DD HH:mm:ss.SSS} {level: <7} {extra[proc]}[{process}] "
LOG_FILE_BYTES = 5 * 1024 * 1024
LOG_FILE_KEPT = 5
"""A log file is rotated at 5 MB and five rotated files are kept: at most 30 MB a
workstation, weeks of an agent's records (docs/operations.md)."""
MIN_FREE_BYTES = 1024 * 1024
"""Below this on its disk the log file is not opened: the process logs to stderr only."""


def _file_format(record: Any) -> str:
    """The file's line: a record bound with ``redacted`` (a pause's text, which may name a
    patient) writes that summary instead of its message; the console keeps the whole."""
    message = "{extra[redacted]}" if "redacted" in record["extra"] else "{message}"
    return LINE + message + "\n{exception}"


def setup_logging(name: str, level: str = "INFO", log_file: Path | None = None) -> None:
    """Log to stderr as ``time level name[pid] message``; JSON lines when ``LEA_LOG_JSON=1``.
    No stderr (``pythonw``, no console): not there. ``log_file``: also to that file, rotated
    (:data:`LOG_FILE_BYTES`, :data:`LOG_FILE_KEPT`), patient text left out; a file that
    cannot be opened is said on stderr and the process goes on."""
    # Every sink with diagnose=False and backtrace=False (docs/operations.md, "Logs"):
    # loguru's defaults print, under a logged exception, the value of every local variable
    # of every frame (typed text, a workflow's inputs, audit records: patient data), and
    # the frames above the one that caught it (the loop's plumbing).
    logger.remove()
    logger.configure(extra={"proc": name})
    if sys.stderr is not None:
        if os.environ.get("LEA_LOG_JSON") == "1":
            logger.add(sys.stderr, level=level, serialize=True, diagnose=False,
                       backtrace=False)
        else:
            logger.add(sys.stderr, level=level, format=LINE + "{message}", diagnose=False,
                       backtrace=False)
    if log_file is None:
        return
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(log_file.parent).free
        if free < MIN_FREE_BYTES:  # every write would fail, each with loguru's traceback
            raise OSError(errno.ENOSPC, f"{free} bytes free on its disk")
        logger.add(log_file, level=level, format=_file_format, rotation=LOG_FILE_BYTES,
                   retention=LOG_FILE_KEPT, encoding="utf-8", delay=False, diagnose=False,
                   backtrace=False)
    except OSError as exc:
        logger.error("cannot write the log file {}: {}", log_file, exc)
