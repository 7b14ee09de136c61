"""The README's first command, as a newcomer runs it: ``python run.py demo`` (the example
workflow on a simulated agent, the pause answered at the terminal) and ``python run.py demo
--queue`` (three patients on two workstations of a pool, the identity check pausing the one
that shows another patient's record). Each starts and stops a whole tree of its own."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT, python_argv

ANSWERS = "Dr Demo\n" + "o\n" * 40
"""A name for the audit trail, then "oui" to every check the pauses ask for."""


def demo(lea_env: dict[str, str], *args: str, answers: str = "") -> tuple[int, str]:
    done = subprocess.run(python_argv("run.py", "demo", *args), env=lea_env, cwd=ROOT,
                          input=answers, text=True, capture_output=True, timeout=240,
                          check=False)
    return done.returncode, done.stdout + done.stderr


def test_the_demo_pauses_for_the_checks_then_completes(lea_env: dict[str, str]) -> None:
    code, out = demo(lea_env, answers=ANSWERS)
    assert code == 0, out[-3000:]
    assert "All six actors answer" in out
    assert "=== Léa is paused ===" in out
    assert re.search(r"\bcompleted\b", out), out[-3000:]


def test_the_demo_stops_cleanly_without_an_answer(lea_env: dict[str, str]) -> None:
    # Nobody at the terminal (standard input closed): it says so, stops its tree, exits 1.
    code, out = demo(lea_env, answers="")
    assert code == 1, out[-3000:]
    assert "no answer on standard input" in out


def test_the_queue_demo_shows_the_identity_pause(lea_env: dict[str, str]) -> None:
    code, out = demo(lea_env, "--queue")
    assert code == 0, out[-3000:]
    assert re.search(r"needs_person \(.*identity.*\) on POSTE-2", out), out[-3000:]
    assert re.search(r": done on POSTE-1", out), out[-3000:]
