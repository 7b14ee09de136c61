"""The command line as a person meets it: every option and argument of every command says
what it is for (``--help``), and the global options (``--data-dir``, ``--config``...) are
taken before or after the command's name, by the real ``python run.py``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.audit_log.store.audit_store import AuditStore
from cli import bundle, ollama_stub
from cli.main import build_parser, every_parser
from messages.audit import AuditRecordIn
from tests.audit_helpers import store_records
from tests.conftest import ROOT

# Not options a person types: argparse's own --help and the subcommand chooser (each
# subcommand's help line is checked through its parent's list, below).
_SKIPPED = (argparse._HelpAction, argparse._SubParsersAction)


def _all_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    return [*every_parser(build_parser(), "run.py"),
            ("cli.bundle", bundle.build_parser()),
            ("cli.ollama_stub", ollama_stub.build_parser())]


def _missing_help(path: str, parser: argparse.ArgumentParser) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            described = {choice.dest for choice in action._choices_actions if choice.help}
            missing += [f"{path} {name}" for name in action.choices if name not in described]
        elif not isinstance(action, _SKIPPED) and not action.help:
            missing.append(f"{path}: {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_and_command_has_a_help_line() -> None:
    missing = [m for path, parser in _all_parsers() for m in _missing_help(path, parser)]
    assert missing == []


def test_the_walk_reaches_the_nested_commands() -> None:
    """The check above sees the leaves (``audit verify``), not only the first level."""
    paths = {path for path, _ in _all_parsers()}
    assert {"run.py audit verify", "run.py replay start", "run.py accounts add",
            "run.py keys generate", "run.py agent"} <= paths


def test_a_missing_help_line_is_found() -> None:
    """The check fails on an option without help, and on a subcommand without one."""
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--quiet", action="store_true")
    parser.add_subparsers().add_parser("mute")
    assert _missing_help("x", parser) == ["x: --quiet", "x mute"]


@pytest.mark.parametrize("argv", [
    ["--data-dir", "D", "--config", "C", "audit", "verify"],
    ["audit", "verify", "--data-dir", "D", "--config", "C"],
    ["audit", "--data-dir", "D", "verify", "--config", "C"],
    ["--data-dir", "elsewhere", "audit", "verify", "--data-dir", "D", "--config", "C"],
])
def test_global_options_are_taken_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.data_dir, args.config, args.audit_command) == ("D", "C", "verify")


def test_a_global_option_not_repeated_after_the_command_keeps_its_value() -> None:
    args = build_parser().parse_args(["--data-dir", "D", "--console-port", "0", "up", "--curve"])
    assert (args.data_dir, args.console_port, args.curve) == ("D", 0, True)
    args = build_parser().parse_args(["replay", "status"])
    assert (args.data_dir, args.config, args.curve, args.console_port) == (None, None, None, None)


def test_the_agents_own_data_dir_stays_its_own() -> None:
    """``run.py agent --data-dir`` is the agent's ledger directory; the tree's goes before."""
    args = build_parser().parse_args(["--data-dir", "T", "agent", "--machine-id", "WS1",
                                      "--data-dir", "L"])
    assert (args.data_dir, args.agent_data_dir) == ("T", "L")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LEA_DATA_DIR", None)
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_run_py_audit_verify_takes_data_dir_after_the_command(tmp_path: Path) -> None:
    """The real command on a real trail: the database under ``--data-dir`` is the one walked,
    whichever side of the command the option is on."""
    store = AuditStore(tmp_path)
    try:
        store_records(store, [AuditRecordIn.model_validate({
            "record_id": f"rp:{i}", "source": "dispatcher", "kind": "action_dispatched",
            "replay_id": "rp", "at": 1000.0 + i, "data": {"n": i}}) for i in range(3)],
            now=5000.0)
    finally:
        store.close()
    after = _run("audit", "verify", "--data-dir", str(tmp_path))
    before = _run("--data-dir", str(tmp_path), "audit", "verify")
    assert after.returncode == 0, after.stderr
    assert "3" in after.stdout and after.stdout == before.stdout
    empty = tmp_path / "empty"
    missing = _run("audit", "verify", "--data-dir", str(empty))
    assert missing.returncode == 2 and str(empty) in missing.stderr
