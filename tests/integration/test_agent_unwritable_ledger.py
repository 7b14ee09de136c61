"""Issue 13, bad input: a ledger folder on a full or read-only disk.

The agent must refuse to start, with a clear message, rather than serve actions it could not
record as started first (docs/architecture.md, "The life of an action"). Real file systems: a
tiny tmpfs filled to the last byte, and one remounted read-only (mounting needs root, as in CI).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port, python_argv


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (room for a ledger and its checkpoint), unmounted at teardown."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def fill(disk: Path) -> None:
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    with contextlib.suppress(OSError):
        while True:
            os.write(fd, b"\0" * 4096)
    os.close(fd)
    with pytest.raises(OSError) as full:
        (disk / "probe").write_bytes(b"x" * 8192)
    assert full.value.errno == errno.ENOSPC


def run_agent(data_dir: Path, lea_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The agent, pointed at a broker port where nothing listens: it must stop before."""
    argv = python_argv("-m", "agent", "--machine-id", "disk1", "--data-dir", str(data_dir),
                       "--connect", f"tcp://127.0.0.1:{free_port()}")
    return subprocess.run(argv, env=lea_env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


def assert_refused(done: subprocess.CompletedProcess[str], why: str) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "cannot write the ledger in" in out and why in out, out
    assert "never performs an action it cannot record first" in out
    assert "Traceback" not in out and "serving on" not in out


def test_a_full_disk_keeps_the_agent_from_starting(tiny_disk: Path,
                                                   lea_env: dict[str, str]) -> None:
    (tiny_disk / "agent").mkdir()
    fill(tiny_disk)
    assert_refused(run_agent(tiny_disk / "agent", lea_env), "No space left on device")


def test_a_full_disk_under_an_existing_ledger_keeps_the_agent_from_starting(
        tiny_disk: Path, lea_env: dict[str, str]) -> None:
    """The ledger was made while there was room; the disk filled up since."""
    from agent.protocol.ledger import Ledger

    Ledger(tiny_disk / "agent" / "ledger.sqlite3").close()
    for leftover in (tiny_disk / "agent").glob("ledger.sqlite3-*"):
        leftover.unlink()  # a clean close leaves no WAL: the next open must write one
    fill(tiny_disk)
    assert_refused(run_agent(tiny_disk / "agent", lea_env), "")


def test_a_read_only_disk_keeps_the_agent_from_starting(tiny_disk: Path,
                                                        lea_env: dict[str, str]) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    assert_refused(run_agent(tiny_disk / "agent", lea_env), "Read-only file system")
