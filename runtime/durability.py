"""What survives a power cut, for the files the server writes (docs/durability.md); the
databases are opened and written by runtime/sqlite_store.py.

- :func:`write_atomic`: a small file replaced whole (the audit head anchor, keys): written to a
  temporary name, fsync'ed, renamed into place, and its directory fsync'ed. After a cut the
  file is the old one or the new one, never empty or half-written.
- :func:`fsync_dir`: the names in a directory made durable, where the OS has that.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the names in directory ``path`` (created, renamed, removed) durable.

    Windows has no directory fsync (a directory cannot even be opened with ``os.open``).
    There, NTFS keeps file system metadata (a file's creation, its name in the directory) in
    its journal, and SQLite's sync of the file with ``synchronous=FULL`` (FlushFileBuffers
    on the file's handle) also flushes that file's metadata: once the first commit has
    returned, the file is found again after a power loss (the agent's ledger, on NTFS).
    Nothing more to do there.
    """
    if sys.platform == "win32":
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Make ``path``'s content durable (its name needs :func:`fsync_dir` of its directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: Path, data: bytes, tmp: Path) -> None:
    """Write ``data`` to ``tmp``, fsync it, rename it to ``path``; the caller fsyncs the
    directory (once for many files)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a cut leaves the old or the new content."""
    write_synced(path, data, path.with_name(f".{path.name}.tmp-{os.getpid()}"))
    fsync_dir(path.parent)
