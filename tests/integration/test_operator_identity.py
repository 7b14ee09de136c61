"""Who answers, from the command line: ``replay resume|pause|cancel`` record the OS user of
the process beside the ``--operator`` name, in the audit trail and in ``audit show``; and
``run.py accounts`` never takes a password as an argument, checks it, and its changes reach
the audit trail even when made with the tree stopped."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

from tests.conftest import ROOT, Spawn, python_argv, wait_until
from tests.integration.console_kit import PASSWORD, audit_records, console_records, console_system
from tests.integration.probes import cli, ready_agent
from tests.integration.system import System, workflow

PAUSED = "paused_need_help"
CHECKED = {"type": "pause_for_human", "parameters": {
    "message": "Contrôle", "safety_checks": [{"id": "chk_a", "label": "Contrôle A"}]}}
WAIT = {"type": "wait", "parameters": {"duration_ms": 10}}
LONG_WAIT = {"type": "wait", "parameters": {"duration_ms": 60_000}}


def me() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def accounts(env: dict[str, str], *args: str, password: str | None = None,
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(python_argv("run.py", "accounts", *args), env=env, cwd=ROOT,
                          input=None if password is None else f"{password}\n", text=True,
                          capture_output=True, timeout=60, check=False)


def test_the_command_line_records_the_os_user_beside_the_operator(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path)
    ready_agent(system, "M1")
    replay_id = system.start(workflow(CHECKED, WAIT), "M1")
    system.wait_status(replay_id, PAUSED, timeout=30)
    # $USER says nothing: the user id of the process does.
    env = {**system.env, "USER": "somebody-else", "LOGNAME": "somebody-else"}
    done = subprocess.run(python_argv("run.py", "replay", "resume", replay_id, "--ack", "chk_a",
                                      "--operator", "Dr Martin"), env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    system.wait_status(replay_id, "completed", timeout=30)
    (resumed,) = audit_records(system, replay_id, "replay_resumed")
    assert resumed["data"]["operator"] == "Dr Martin"
    assert resumed["data"]["os_user"] == me()
    assert "account" not in resumed["data"]  # no console account: the command line
    shown = cli(system, "audit", "show", replay_id)
    line = next(x for x in shown.stdout.splitlines() if "replay_resumed" in x)
    assert "operator='Dr Martin'" in line or "operator=Dr Martin" in line, line
    assert f"os_user={me()}" in line, line

    file = tmp_path / "slow.json"
    file.write_text(workflow(LONG_WAIT, WAIT, workflow_id="slow").model_dump_json())
    started_cli = cli(system, "replay", "start", str(file), "--machine-id", "M1",
                      "--operator", "IDE Dupont", "--json")
    assert started_cli.returncode == 0, started_cli.stderr
    slow = json.loads(started_cli.stdout)["replay_id"]
    assert cli(system, "replay", "pause", slow, "--operator", "IDE Dupont").returncode == 0
    system.wait_status(slow, PAUSED, timeout=30)
    assert cli(system, "replay", "cancel", slow, "--operator", "IDE Dupont").returncode == 0
    (paused,) = audit_records(system, slow, "replay_paused")
    assert paused["data"]["detail"]["os_user"] == me()
    (cancelled,) = audit_records(system, slow, "replay_cancelled")
    assert (cancelled["data"]["operator"], cancelled["data"]["os_user"]) == ("IDE Dupont", me())
    (started,) = audit_records(system, slow, "replay_started")
    assert (started["data"]["operator"], started["data"]["os_user"]) == ("IDE Dupont", me())


def test_accounts_take_no_password_argument_and_are_audited_even_made_offline(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    # A password given as an argument is not an option at all.
    refused = accounts(lea_env, "add", "dr.martin", "--role", "operator", PASSWORD)
    assert refused.returncode == 2 and "unrecognized arguments" in refused.stderr
    short = accounts(lea_env, "add", "dr.martin", "--role", "operator", password="short")
    assert short.returncode == 1 and "at least 12" in short.stderr
    named = accounts(lea_env, "add", "dr.martin", "--role", "operator",
                     password="dr.martin's password")
    assert named.returncode == 1 and "account name" in named.stderr
    bad_name = accounts(lea_env, "add", "Dr Martin", "--role", "operator", password=PASSWORD)
    assert bad_name.returncode == 1 and "account name" in bad_name.stderr
    # With the tree stopped: the account and its audit record wait in the console's database.
    made = accounts(lea_env, "add", "dr.martin", "--role", "operator", password=PASSWORD)
    assert made.returncode == 0, made.stderr
    again = accounts(lea_env, "add", "dr.martin", "--role", "viewer", password=PASSWORD)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert accounts(lea_env, "role", "dr.martin", "admin").returncode == 0
    assert accounts(lea_env, "role", "nobody", "admin").returncode == 1
    listed = accounts(lea_env, "list", "--json")
    assert [json.loads(x)["role"] for x in listed.stdout.splitlines()] == ["admin"]
    assert PASSWORD not in (Path(lea_env["LEA_DATA_DIR"]) / "console.sqlite3").read_text(
        errors="replace")

    system, _url = console_system(spawn, lea_env, tmp_path)
    wait_until(lambda: len(console_records(system)) >= 2, timeout=30, interval=0.2)
    added, role = console_records(system)[:2]
    assert (added["kind"], added["data"]["account"], added["data"]["role"]) == (
        "account_added", "dr.martin", "operator")
    assert added["data"]["os_user"] == me() and added["data"]["via"] == "command_line"
    assert (role["kind"], role["data"]["role"], role["data"]["previous_role"]) == (
        "account_role_changed", "admin", "operator")
