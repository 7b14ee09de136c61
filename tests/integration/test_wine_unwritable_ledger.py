"""Issue 13, bad input, on Windows: a ledger folder on a full or read-only disk keeps the
agent of the shipped folder (Windows CPython under Wine) from starting, with the clear
message of the Linux agent (test_agent_unwritable_ledger.py), never a traceback. The disks
are real: a tiny tmpfs filled to the last byte, or remounted read-only, which Wine shows to
Windows programs as a folder of drive Z:.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import free_port
from tests.integration.test_agent_unwritable_ledger import (  # noqa: F401 - tiny_disk: the
    fill,  # Linux test's disk fixture, registered here by this import (hence F811 below)
    tiny_disk,
)
from tests.wine import WineBundle, windows_path


def run_windows_agent(bundle: WineBundle, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """The agent, pointed at a broker port where nothing listens: it must stop before."""
    return bundle.run_python("-m", "agent", "--machine-id", "disk1", "--data-dir",
                             windows_path(data_dir), "--connect",
                             f"tcp://127.0.0.1:{free_port()}",
                             env=bundle.wine.env(PYTHONUNBUFFERED="1"))


def assert_refused(done: subprocess.CompletedProcess[str]) -> None:
    out = done.stdout
    assert done.returncode == 2, out
    assert "cannot write the ledger in" in out, out
    assert "never performs an action it cannot record first" in out
    assert "Traceback" not in out and "serving on" not in out


def test_a_full_disk_keeps_the_windows_agent_from_starting(
        tiny_disk: Path, agent_bundle: WineBundle) -> None:  # noqa: F811
    (tiny_disk / "Données de Léa").mkdir()
    fill(tiny_disk)
    done = run_windows_agent(agent_bundle, tiny_disk / "Données de Léa")
    assert_refused(done)


def test_a_read_only_disk_keeps_the_windows_agent_from_starting(
        tiny_disk: Path, agent_bundle: WineBundle) -> None:  # noqa: F811
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    done = run_windows_agent(agent_bundle, tiny_disk / "agent")
    assert_refused(done)


def test_an_existing_ledger_on_a_disk_now_full_or_read_only_keeps_it_from_starting(
        tiny_disk: Path, agent_bundle: WineBundle) -> None:  # noqa: F811
    """The ledger was made while there was room: opening it must write (its WAL), so a
    disk full since, then remounted read-only, refuses the agent both times."""
    from agent.protocol.ledger import Ledger

    Ledger(tiny_disk / "agent" / "ledger.sqlite3").close()
    for leftover in (tiny_disk / "agent").glob("ledger.sqlite3-*"):
        leftover.unlink()  # a clean close leaves no WAL: the next open must write one
    fill(tiny_disk)
    done = run_windows_agent(agent_bundle, tiny_disk / "agent")
    assert_refused(done)
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    done = run_windows_agent(agent_bundle, tiny_disk / "agent")
    assert_refused(done)
