"""A misspelt setting stops the process that would have ignored it, at start
(runtime/setting_names.py, docs/operations.md "Settings")."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import ROOT, python_argv


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(python_argv(*argv), env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def test_the_tree_does_not_start_with_a_misspelt_setting(lea_env: dict[str, str]) -> None:
    env = {**lea_env, "LEA_CONSOLE_SESION_LIFETIME_S": "900"}
    done = _run(env, "run.py")
    assert done.returncode == 2, done.stderr
    assert ("unknown setting LEA_CONSOLE_SESION_LIFETIME_S: did you mean "
            "LEA_CONSOLE_SESSION_LIFETIME_S?") in done.stderr, done.stderr
    assert "supervisor:" not in done.stderr  # refused before any child was started


def test_the_agent_does_not_start_with_a_misspelt_setting(lea_env: dict[str, str],
                                                          tmp_path: Path) -> None:
    env = {**lea_env, "LEA_DESKTOP_SCREENSHOT_QUALITE": "50"}
    for argv in (("run.py", "agent"), ("-m", "agent")):
        done = _run(env, *argv, "--machine-id", "M1", "--executor", "simulated",
                    "--data-dir", str(tmp_path / "agent"))
        assert done.returncode == 2, (argv, done.stderr)
        assert ("unknown setting LEA_DESKTOP_SCREENSHOT_QUALITE: did you mean "
                "LEA_DESKTOP_SCREENSHOT_QUALITY?") in done.stderr, done.stderr


def test_a_child_started_alone_does_not_start_with_a_misspelt_setting(
        lea_env: dict[str, str]) -> None:
    env = {**lea_env, "RPA_LOOP_DETECTOR_ENABLE": "0"}
    for argv in (("-m", "actors", "dispatcher"), ("-m", "broker"), ("-m", "console")):
        done = _run(env, *argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert ("unknown setting RPA_LOOP_DETECTOR_ENABLE: did you mean "
                "RPA_LOOP_DETECTOR_ENABLED?") in done.stderr, done.stderr


def test_a_name_like_no_setting_is_a_warning(lea_env: dict[str, str]) -> None:
    env = {**lea_env, "LEA_XYZZY": "1"}
    done = _run(env, "run.py", "workflow", "check", "examples/admission_note.json")
    assert done.returncode == 0, done.stderr
    assert "warning: unknown setting LEA_XYZZY: nothing reads it" in done.stderr


def test_a_renamed_setting_stops_the_process_naming_its_new_name(
        lea_env: dict[str, str]) -> None:
    env = {**lea_env, "LEA_DISPATCHER_ROUTE_ENABLED": "0"}
    done = _run(env, "-m", "actors", "dispatcher")
    assert done.returncode == 2, done.stderr
    assert ("setting LEA_DISPATCHER_ROUTE_ENABLED was renamed to "
            "LEA_DISPATCHER_AGENT_ROUTES") in done.stderr, done.stderr
