"""Who may change replays (docs/operations.md, "Who may change replays"): through real
processes, the server's other Unix accounts at the people's door, the plain loopback endpoint,
and forged fields.

The other account is made here (``useradd``, a group of its own), and runs the command line
as itself (tests/as_user.py says why not ``runuser``): the broker learns its uid from the
kernel, the actors refuse it until it is in ``LEA_CONTROL_GROUP``, and every refusal names it
in the audit trail.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from messages.audit import AppendRecords, AuditRecordIn, PruneScreenshots
from messages.base import Message
from messages.control import ErrorReply
from messages.replay import CancelReplay, ResumeReplay, StartReplay
from tests.conftest import ROOT, Spawn, python_argv
from tests.integration.console_kit import audit_records
from tests.integration.probes import cli, ready_agent
from tests.integration.system import System, control_door, workflow
from transport.client import CallFailed, SyncClient

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd (passwd) to make another Unix account")

PAUSED = "paused_need_help"
CHECKED = {"type": "pause_for_human", "parameters": {
    "message": "Contrôle", "safety_checks": [{"id": "chk_a", "label": "Contrôle A"}]}}
WAIT = {"type": "wait", "parameters": {"duration_ms": 10}}


@pytest.fixture
def intruder() -> Iterator[tuple[str, str]]:
    """(a new Unix account, a new group it is not in yet); both removed afterwards."""
    tag = uuid.uuid4().hex[:8]
    user, group = f"lea-t-{tag}", f"lea-g-{tag}"
    subprocess.run(["groupadd", group], check=True)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                   check=True)
    try:
        yield user, group
    finally:
        subprocess.run(["userdel", user], check=False)
        subprocess.run(["groupdel", group], check=False)
        subprocess.run(["groupdel", user], check=False)  # its own group, where made


def as_user(system: System, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python run.py ARGS`` as OS account ``user``."""
    return subprocess.run(python_argv("-m", "tests.as_user", user, "run.py", *args),
                          env=system.env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


def trail(system: System) -> list[dict[str, Any]]:
    """Every record of the audit trail (``audit export``)."""
    done = cli(system, "audit", "export")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def paused(system: System) -> tuple[System, str]:
    """The system, and a replay of it paused at a check (an agent M1 serving it)."""
    ready_agent(system, "M1")
    replay_id = system.start(workflow(CHECKED, WAIT), "M1")
    system.wait_status(replay_id, PAUSED, timeout=30)
    return system, replay_id


def refusal(call: SyncClient, service: str, message: Message) -> ErrorReply:
    with pytest.raises(CallFailed) as failed:
        call.call(service, message, timeout_s=5.0)
    return ErrorReply(code=failed.value.code, message=failed.value.message)


def test_another_account_is_refused_and_named_until_it_is_in_the_group(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path,
        intruder: tuple[str, str]) -> None:
    user, group = intruder
    uid = pwd.getpwnam(user).pw_uid
    system, replay_id = paused(System(spawn, lea_env, tmp_path,
                                      extra_env={"LEA_CONTROL_GROUP": group}))

    # Reading is open to every account; changing is not.
    looked = as_user(system, user, "replay", "status", replay_id)
    assert looked.returncode == 0 and replay_id in looked.stdout, looked.stderr
    for command in (["replay", "cancel", replay_id, "--operator", "Dr Martin"],
                    ["replay", "resume", replay_id, "--ack", "chk_a"],
                    ["audit", "prune", "--prune-screenshots-older-than", "0"]):
        done = as_user(system, user, *command)
        assert done.returncode != 0, (command, done.stdout)
        assert "not_in_control_group" in done.stderr and group in done.stderr, done.stderr
        assert user in done.stderr, done.stderr
    assert system.status(replay_id).status == PAUSED

    refused = audit_records(system, replay_id, "request_refused")
    assert [(r["data"]["type"], r["data"]["os_user"], r["data"]["uid"], r["data"]["code"])
            for r in refused] == [("replay.cancel", user, uid, "not_in_control_group"),
                                  ("replay.resume", user, uid, "not_in_control_group")]
    assert refused[0]["data"]["operator"] == "Dr Martin"  # what it claimed, beside who it is
    (pruning,) = [r for r in trail(system) if r["source"] == "audit_log"
                  and r["kind"] == "request_refused"]
    assert (pruning["data"]["type"], pruning["data"]["os_user"]) == (
        "audit.prune_screenshots", user)

    # In the group, the same account may: recorded under its name, not under --operator's.
    subprocess.run(["usermod", "-aG", group, user], check=True)
    done = as_user(system, user, "replay", "resume", replay_id, "--ack", "chk_a",
                   "--operator", "Dr Martin")
    assert done.returncode == 0, done.stderr
    system.wait_status(replay_id, "completed", timeout=30)
    (resumed,) = audit_records(system, replay_id, "replay_resumed")
    assert (resumed["data"]["os_user"], resumed["data"]["operator"]) == (user, "Dr Martin")
    assert "account" not in resumed["data"]


def test_the_loopback_endpoint_changes_nothing_and_nobody_claims_another_name(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, replay_id = paused(System(spawn, lea_env, tmp_path))
    loopback = SyncClient(system.env["LEA_MDP_ENDPOINT"])
    door = SyncClient(control_door(system.env))
    forged = AuditRecordIn(record_id=f"forged-{uuid.uuid4().hex}", source="dispatcher",
                           kind="replay_resumed", replay_id=replay_id, at=1.0,
                           data={"operator": "dr.martin"})
    try:
        # The plain endpoint: nothing says who calls; it reads, it does not change.
        assert refusal(loopback, "dispatcher", CancelReplay(replay_id=replay_id)).code == \
            "forbidden"
        assert refusal(loopback, "audit_log", PruneScreenshots(older_than_days=0)).code == \
            "forbidden"
        # The people's door, as the server's own account: a record in the dispatcher's name,
        # a console account or role, another OS user: refused.
        for client in (loopback, door):
            assert refusal(client, "audit_log", AppendRecords(records=[forged])).code == \
                "forbidden"
        for claim in ({"account": "dr.martin", "role": "operator"}, {"role": "admin"},
                      {"os_user": "dr.martin"}):
            got = refusal(door, "dispatcher", ResumeReplay(
                replay_id=replay_id, acknowledged_check_ids=["chk_a"], **claim))
            assert got.code == "forged_claim", (claim, got)
        started = refusal(door, "dispatcher", StartReplay(
            workflow=workflow(WAIT), machine_id="M1", account="dr.martin", role="admin"))
        assert started.code == "forged_claim"
    finally:
        loopback.close()
        door.close()
    assert system.status(replay_id).status == PAUSED
    records = trail(system)
    assert not [r for r in records if r["record_id"] == forged.record_id]
    assert not [r for r in records if r["kind"] == "replay_resumed"]
    refused = audit_records(system, replay_id, "request_refused")
    assert [(r["data"]["type"], r["data"]["code"]) for r in refused] == [
        ("replay.cancel", "forbidden")] + [("replay.resume", "forged_claim")] * 3
    assert refused[0]["data"]["identity"] is None  # the loopback: nobody known
    assert {r["data"]["os_user"] for r in refused[1:]} == {pwd.getpwuid(os.getuid()).pw_name}
