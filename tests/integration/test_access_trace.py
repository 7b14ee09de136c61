"""Every view of a patient's data is recorded, with the whole tree: a person who opens a
replay's screenshot, its timeline or its page in the console, or runs ``audit show`` /
``audit export``, is named in the audit trail with what and when; ``audit access --person``
and ``--replay`` list those views (and nobody who saw nothing)."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

from messages.audit import AuditPage, AuditQuery
from tests.conftest import Spawn, wait_until
from tests.integration.console_kit import add_account, console_system, signed_in
from tests.integration.probes import cli
from tests.integration.system import System
from tests.integration.test_console_api import paused_replay


def views(system: System, *selector: str) -> list[dict[str, Any]]:
    """``audit access ... --json``."""
    done = cli(system, "audit", "access", *selector, "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_console_views_are_recorded_by_person_and_by_replay(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path)
    add_account(system, "dr.view", "viewer")
    add_account(system, "dr.idle", "operator")
    replay_id = paused_replay(system)
    page = system.call("audit_log", AuditQuery(replay_id=replay_id))
    assert isinstance(page, AuditPage)
    digest = next(d for r in page.records for d in r.screenshots.values())
    with signed_in(url, "dr.idle") as idle:
        assert idle.get("/api/health").status_code == 200  # signed in, saw nothing
    with signed_in(url, "dr.view") as c:
        assert c.get(f"/api/screenshots/{digest}").status_code == 200
        assert c.get(f"/api/replays/{replay_id}/timeline").status_code == 200
        assert c.get(f"/replays/{replay_id}").status_code == 200  # the page: a timeline too
        assert c.get(f"/api/replays/{replay_id}").status_code == 200

    def seen() -> list[tuple[str, str | None]]:
        return sorted((v["what"], v.get("replay_id") or v.get("sha256"))
                      for v in views(system, "--person", "dr.view"))

    expected = sorted([("screenshot", digest), ("timeline", replay_id),
                       ("replay", replay_id)])
    wait_until(lambda: seen() == expected, timeout=20)  # the page's timeline: once a period
    by_replay = views(system, "--replay", replay_id)
    assert {(v["account"], v["what"]) for v in by_replay} == {
        ("dr.view", "screenshot"), ("dr.view", "timeline"), ("dr.view", "replay")}
    assert all(v["role"] == "viewer" and v["via"] == "session" and v["client"] == "127.0.0.1"
               for v in by_replay)
    assert views(system, "--person", "dr.idle") == []
    readable = cli(system, "audit", "access", "--replay", replay_id)
    assert "dr.view (viewer, console from 127.0.0.1)  saw screenshot image" in readable.stdout


def test_audit_show_and_export_record_who_ran_them_before_printing(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, _url = console_system(spawn, lea_env, tmp_path)
    replay_id = paused_replay(system)
    shown = cli(system, "audit", "show", replay_id, "--json")
    assert shown.returncode == 0, shown.stderr
    printed = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    assert "data_viewed" not in {r["kind"] for r in printed}  # not a step of the replay
    assert cli(system, "audit", "export").returncode == 0
    mine = views(system, "--person", getpass.getuser())
    assert [v["what"] for v in mine] == ["timeline", "export"]
    assert mine[0]["replay_id"] == replay_id and mine[0]["source"] == "cli"
    assert mine[0]["os_user"] == getpass.getuser()
    assert [v["what"] for v in views(system, "--replay", replay_id)] == ["timeline"]
