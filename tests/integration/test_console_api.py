"""The console's JSON API over real HTTP, against the whole tree: an operator account on
every call and on the event stream (the token only reads), roles decided on the server,
every answer recorded under the account, failed sign-ins limited and audited, accounts
disabled or given a new password by ``run.py accounts``; and bad input of every kind answered
with a clear 4xx (the console and the replay unharmed). Plus the loopback-only rule, in
process."""

from __future__ import annotations

import hashlib
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from console.access import SESSION_COOKIE
from messages.audit import AuditPage, AuditQuery
from supervision.tree import child_pid
from tests.conftest import ROOT, Spawn, python_argv, wait_until
from tests.integration.console_kit import (
    PASSWORD,
    add_account,
    app_in_process,
    audit_records,
    console_records,
    console_system,
    signed_in,
)
from tests.integration.probes import cli, ready_agent
from tests.integration.system import System, workflow

TOKEN = "a-console-token-for-the-tests-0123"
PAUSED = "paused_need_help"
WAIT = {"type": "wait", "parameters": {"duration_ms": 10}}
CHECKED_PAUSE = {"type": "pause_for_human", "parameters": {
    "message": "Contrôle", "safety_checks": [
        {"id": "chk_a", "label": "Premier contrôle", "required": True},
        {"id": "chk_b", "label": "Second contrôle", "required": True}]}}


def error_of(reply: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert reply.status_code == status, (reply.status_code, reply.text)
    assert reply.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = reply.json()
    assert body["error"] == code, body
    assert body["message"]
    return body


def first_event(client: httpx.Client, **kwargs: Any) -> list[str]:
    """The lines of the first server-sent event of /api/events."""
    with client.stream("GET", "/api/events", **kwargs) as reply:
        assert reply.status_code == 200, reply.read()
        assert reply.headers["content-type"].startswith("text/event-stream")
        lines: list[str] = []
        for line in reply.iter_lines():
            if not line and lines:
                return lines
            if line and not line.startswith(":"):
                lines.append(line)
    raise AssertionError("the stream ended before its first event")


def paused_replay(system: System) -> str:
    ready_agent(system, "M1")
    click = {"type": "click", "target_spec": {"x_pct": 0.3, "y_pct": 0.3}}
    replay_id = system.start(workflow(click, CHECKED_PAUSE, WAIT), "M1")
    system.wait_status(replay_id, PAUSED, timeout=30)
    return replay_id


def test_every_call_needs_an_account_and_the_token_only_reads(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path, LEA_CONSOLE_TOKEN=TOKEN)
    add_account(system, "dr.martin", "operator")
    replay_id = paused_replay(system)
    guarded = ["/api/health", "/api/replays", "/api/replays/r1", "/api/replays/r1/timeline",
               "/api/screenshots/" + "0" * 64, "/api/events", "/api/me"]
    with httpx.Client(base_url=url, timeout=10) as anonymous:
        for path in guarded:  # from loopback too: a local proxy must not open the door
            error_of(anonymous.get(path), 401, "login_required")
            error_of(anonymous.get(path, headers={"Authorization": "Bearer wrong"}), 401,
                     "login_required")
        error_of(anonymous.post(f"/api/replays/{replay_id}/resume", json={}), 401,
                 "login_required")
        anonymous.cookies.set(SESSION_COOKIE, "made-up")
        error_of(anonymous.post(f"/api/replays/{replay_id}/cancel", json={}), 401,
                 "login_required")
        anonymous.cookies.clear()
        page = anonymous.get("/")
        assert page.status_code == 401 and "signin-password" in page.text
        assert "replay-rows" not in page.text  # no data on the sign-in page
        error_of(anonymous.post("/api/login", json={"account": "dr.martin",
                                                    "password": "wrong password!"}), 401,
                 "login_failed")

    # The token reads (scripts, monitoring) but answers nothing: an answer names a person.
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, timeout=10, headers=bearer) as scripted:
        assert [r["replay_id"] for r in scripted.get("/api/replays").json()["replays"]] == [
            replay_id]
        assert first_event(scripted)[0] == "event: snapshot"
        assert scripted.get("/api/me").json() == {"account": None, "role": "viewer",
                                                  "via": "token", "expires_at": None}
        for action in ("resume", "pause", "cancel"):
            error_of(scripted.post(f"/api/replays/{replay_id}/{action}", json={}), 403,
                     "role_forbidden")
    assert system.status(replay_id).status == PAUSED

    with httpx.Client(base_url=url, timeout=10) as browser:
        signed = browser.post("/api/login", json={"account": " Dr.Martin ",
                                                  "password": PASSWORD})
        assert signed.status_code == 200, signed.text
        assert signed.json()["account"] == "dr.martin" and signed.json()["role"] == "operator"
        cookie = browser.cookies[SESSION_COOKIE]
        assert "httponly" in signed.headers["set-cookie"].lower()
        assert "samesite=strict" in signed.headers["set-cookie"].lower()
        database = (Path(lea_env["LEA_DATA_DIR"]) / "console.sqlite3")
        assert cookie.encode() not in database.read_bytes()  # only its hash is kept
        assert browser.get("/api/health").json()["dispatcher"] == "ok"
        assert browser.get("/").status_code == 200
        lines = first_event(browser)
        assert lines[0] == "event: snapshot" and any(x.startswith("data: ") for x in lines)

        # The console is a child of the tree: killed, it is started again, and the session
        # (kept in the console's database) still opens it.
        killed = system.kill("console")
        wait_until(lambda: child_pid(system.tree.pid, "console") not in (None, killed))

        def serving() -> bool:
            try:
                return browser.get("/api/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(serving, timeout=20, interval=0.1)
        assert browser.post("/api/logout", json={}).status_code == 204
        assert SESSION_COOKIE not in browser.cookies
        browser.cookies.set(SESSION_COOKIE, cookie)  # kept by someone: ended on the server
        error_of(browser.get("/api/health"), 401, "login_required")


def test_roles_decide_on_the_server_and_every_answer_names_the_account(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path)
    add_account(system, "obs.durand", "viewer")
    add_account(system, "ide.dupont", "operator")
    add_account(system, "cadre.sante", "admin")
    ready_agent(system, "M1")
    replay_id = system.start(workflow(CHECKED_PAUSE, WAIT, WAIT), "M1")
    system.wait_status(replay_id, PAUSED, timeout=30)
    acks = {"acknowledged_check_ids": ["chk_a", "chk_b"]}
    with signed_in(url, "obs.durand") as viewer:
        assert viewer.get(f"/api/replays/{replay_id}").json()["pause"]["required_ids"] == [
            "chk_a", "chk_b"]  # a viewer reads
        for action, body in (("resume", acks), ("pause", {}), ("cancel", {})):
            refused = error_of(viewer.post(f"/api/replays/{replay_id}/{action}", json=body),
                               403, "role_forbidden")
            assert refused["detail"] == {"role": "viewer", "needs": "answer"}
        error_of(viewer.get("/api/accounts"), 403, "role_forbidden")
    assert system.status(replay_id).status == PAUSED  # nothing was done

    with signed_in(url, "ide.dupont") as operator:
        # The name comes from the session, never from the body.
        error_of(operator.post(f"/api/replays/{replay_id}/resume", json={
            **acks, "operator": "someone else"}), 422, "invalid_request")
        done = operator.post(f"/api/replays/{replay_id}/resume", json=acks)
        assert done.status_code == 200, done.text
        error_of(operator.get("/api/accounts"), 403, "role_forbidden")
    system.wait_status(replay_id, "completed", timeout=30)

    slow = system.start(workflow({"type": "wait", "parameters": {"duration_ms": 60_000}},
                                 WAIT), "M1")
    with signed_in(url, "cadre.sante") as admin:
        paused = admin.post(f"/api/replays/{slow}/pause", json={"message": "Je regarde"})
        assert paused.status_code == 200, paused.text
        system.wait_status(slow, PAUSED, timeout=30)
        assert admin.post(f"/api/replays/{slow}/cancel", json={}).status_code == 200
        names = {a["name"]: a["role"] for a in admin.get("/api/accounts").json()["accounts"]}
        assert names == {"obs.durand": "viewer", "ide.dupont": "operator",
                         "cadre.sante": "admin"}

    (resumed,) = audit_records(system, replay_id, "replay_resumed")
    assert {k: resumed["data"].get(k) for k in ("operator", "account", "role")} == {
        "operator": "ide.dupont", "account": "ide.dupont", "role": "operator"}
    assert resumed["data"]["acknowledged_check_ids"] == ["chk_a", "chk_b"]
    assert "os_user" not in resumed["data"]

    def refusals() -> list[dict[str, Any]]:
        return [r for r in audit_records(system, replay_id, "request_refused")
                if r["source"] == "console"]

    wait_until(lambda: len(refusals()) == 3, timeout=20, interval=0.2)
    assert sorted(r["data"]["path"].rsplit("/", 1)[-1] for r in refusals()) == [
        "cancel", "pause", "resume"]
    assert {(r["data"]["account"], r["data"]["role"]) for r in refusals()} == {
        ("obs.durand", "viewer")}
    (by_admin,) = audit_records(system, slow, "replay_paused")
    assert by_admin["data"]["detail"]["account"] == "cadre.sante"
    assert by_admin["data"]["detail"]["role"] == "admin"
    (cancelled,) = audit_records(system, slow, "replay_cancelled")
    assert cancelled["data"]["account"] == "cadre.sante"


def test_failed_sign_ins_are_limited_per_account_and_per_address_and_audited(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path, LEA_CONSOLE_LOGIN_MAX_FAILURES="3",
                                 LEA_CONSOLE_LOGIN_MAX_FAILURES_PER_ADDRESS="9")
    add_account(system, "ide.dupont", "operator")
    add_account(system, "dr.martin", "operator")
    add_account(system, "cadre.sante", "admin")
    with httpx.Client(base_url=url, timeout=10) as c:
        def login(name: str, password: str) -> httpx.Response:
            return c.post("/api/login", json={"account": name, "password": password})

        for _ in range(3):
            error_of(login("ide.dupont", "not the password"), 401, "login_failed")
        limited = error_of(login("ide.dupont", PASSWORD), 429, "login_rate_limited")
        assert limited["detail"]["limit"] == "account"
        assert int(limited["detail"]["retry_after_s"]) > 0
        # Another account from the same address is not held up by this one...
        assert login("dr.martin", PASSWORD).status_code == 200
        error_of(login("no.such.person", "anything at all"), 401, "login_failed")
        error_of(login("dr.martin", "not the password"), 401, "login_failed")
        error_of(login("dr.martin", "not the password"), 401, "login_failed")
        # Sent all at once, wrong passwords do not pass the limit while the first ones are
        # being checked: only 3 are looked at, the others wait.
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda n: httpx.post(
                f"{url}/api/login", json={"account": "cadre.sante", "password": f"guess {n}"},
                timeout=60).status_code, range(8)))
        assert sorted(together) == [401] * 3 + [429] * 5, together
        # ...until the address itself reaches its limit (9 failures from 127.0.0.1).
        by_address = error_of(login("dr.martin", PASSWORD), 429, "login_rate_limited")
        assert by_address["detail"]["limit"] == "address"
        assert login("dr.martin", PASSWORD).status_code == 429

    wait_until(lambda: len(console_records(system, "login_rate_limited")) == 3, timeout=20,
               interval=0.2)
    failed = console_records(system, "login_failed")
    assert [r["data"].get("account") for r in failed] == [
        "ide.dupont", "ide.dupont", "ide.dupont", None, "dr.martin", "dr.martin",
        "cadre.sante", "cadre.sante", "cadre.sante"]
    assert [r["data"]["reason"] for r in failed][2:4] == ["bad_password", "unknown_account"]
    assert failed[3]["data"]["account_known"] is False  # an unknown name is not kept
    assert all(r["data"]["client"] == "127.0.0.1" for r in failed)
    limited_records = console_records(system, "login_rate_limited")
    assert [(r["data"].get("account"), r["data"]["limit"]) for r in limited_records] == [
        ("ide.dupont", "account"), ("cadre.sante", "account"), ("dr.martin", "address")]
    # (each recorded once, not at every refused attempt)
    (succeeded,) = console_records(system, "login_succeeded")
    assert succeeded["data"]["account"] == "dr.martin"
    assert succeeded["data"]["role"] == "operator"


def test_a_disabled_account_or_a_new_password_ends_its_sessions(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path)
    add_account(system, "ide.dupont", "operator")
    with signed_in(url, "ide.dupont") as first:
        assert cli(system, "accounts", "disable", "ide.dupont").returncode == 0
        error_of(first.get("/api/replays"), 401, "login_required")
        error_of(first.post("/api/login", json={"account": "ide.dupont",
                                                "password": PASSWORD}), 403,
                 "account_disabled")
        assert cli(system, "accounts", "enable", "ide.dupont").returncode == 0
    with signed_in(url, "ide.dupont") as second:
        changed = subprocess.run(
            python_argv("run.py", "accounts", "password", "ide.dupont"), env=system.env,
            cwd=ROOT, input="a new password, long enough\n", text=True, capture_output=True,
            timeout=60, check=False)
        assert changed.returncode == 0, changed.stderr
        error_of(second.get("/api/replays"), 401, "login_required")
    with signed_in(url, "ide.dupont", "a new password, long enough") as third:
        assert third.get("/api/me").json()["account"] == "ide.dupont"
    kinds = ["account_added", "account_disabled", "sessions_ended", "account_enabled",
             "account_password_changed"]
    wait_until(lambda: [r["kind"] for r in console_records(system)
                        if r["kind"] in kinds] == [*kinds[:4], kinds[4], "sessions_ended"],
               timeout=20, interval=0.2)
    assert all(r["data"]["os_user"] and r["data"]["via"] == "command_line"
               for r in console_records(system) if r["kind"].startswith("account_"))


def test_bad_input_gets_a_clear_4xx_and_harms_nothing(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path)
    add_account(system, "dr.test", "operator")
    replay_id = paused_replay(system)
    resume = f"/api/replays/{replay_id}/resume"
    with signed_in(url, "dr.test") as c:
        error_of(c.get("/api/replays/no-such-replay"), 404, "not_found")
        error_of(c.get("/api/replays/no-such-replay/timeline"), 404, "not_found")
        error_of(c.post("/api/replays/no-such-replay/resume", json={}), 404,
                 "not_found")
        error_of(c.post("/api/replays/no-such-replay/cancel", json={}), 404,
                 "not_found")
        error_of(c.get("/api/replays/bad%20id%3F"), 422, "invalid_request")
        error_of(c.post(resume, content=b"{not json", headers={
            "Content-Type": "application/json"}), 400, "invalid_json")
        error_of(c.post(resume, data={"acknowledged_check_ids": "chk_a"}), 415,
                 "unsupported_media_type")
        error_of(c.post(resume, json={"acknowledged_check_ids": [1]}), 422, "invalid_request")
        error_of(c.post(resume, json={"acknowledged_check_ids": "chk_a"}),
                 422, "invalid_request")
        error_of(c.post(resume, json={"force": True}), 422,
                 "invalid_request")
        error_of(c.post(resume, json={}, headers={
            "Origin": "http://evil.example"}), 403, "cross_origin")
        refused = error_of(c.post(resume, json={
            "acknowledged_check_ids": ["chk_a"]}), 400,
            "required_checks_missing")
        assert refused["missing"] == ["chk_b"]  # the origin spec's body
        error_of(c.post(resume, json={"acknowledged_check_ids": [
            "chk_a", "chk_b", "chk_z"]}), 400, "unknown_check_ids")
        assert system.status(replay_id).status == PAUSED  # nothing half-applied

        error_of(c.get("/api/screenshots/zzz"), 422, "invalid_request")
        error_of(c.get("/api/screenshots/" + "0" * 64), 404, "screenshot_not_found")
        error_of(c.get("/api/no-such-route"), 404, "not_found")
        assert c.get("/no-such-page").status_code == 404
        assert c.get(f"/replays/{'x' * 20}").status_code == 404

        # A real image of the trail, by hash (audit_log's GetScreenshot).
        page = system.call("audit_log", AuditQuery(replay_id=replay_id))
        assert isinstance(page, AuditPage)
        digest = next(d for r in page.records for d in r.screenshots.values())
        image = c.get(f"/api/screenshots/{digest}")
        assert image.status_code == 200 and image.headers["content-type"] == "image/png"
        assert hashlib.sha256(image.content).hexdigest() == digest

        detail = c.get(f"/api/replays/{replay_id}").json()
        assert detail["pause"]["required_ids"] == ["chk_a", "chk_b"]
        done = c.post(resume, json={"acknowledged_check_ids": ["chk_a", "chk_b"]})
        assert done.status_code == 200 and done.json()["status"] == "resumed", done.text
        error_of(c.post(resume, json={}), 409, "not_paused")
        system.wait_status(replay_id, "completed", timeout=30)
        error_of(c.post(f"/api/replays/{replay_id}/cancel", json={}), 409,
                 "not_running")
        spec = c.get("/api/openapi.json").json()
        assert "/api/replays/{replay_id}/resume" in spec["paths"]
        assert c.get("/api/health").status_code == 200  # still serving


def test_without_a_token_only_this_machine_is_served(tmp_path: Path) -> None:
    """In process (nothing listens, no request leaves): the app's own access rule."""
    with app_in_process(tmp_path) as app:
        remote = TestClient(app, client=("192.0.2.7", 40000), base_url="http://192.0.2.1:8765")
        denied = remote.get("/api/replays")
        assert denied.status_code == 403 and denied.json()["error"] == "loopback_only"
        assert remote.get("/").status_code == 403
        local = TestClient(app, client=("127.0.0.1", 40000), base_url="http://evil.example")
        rebound = local.get("/api/replays")  # DNS rebinding: a page of another name
        assert rebound.status_code == 403 and rebound.json()["error"] == "host_not_allowed"
