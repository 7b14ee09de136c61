"""The console's JSON API over real HTTP, against the whole tree: the access token on every
call and on the event stream, and bad input of every kind answered with a clear 4xx (the
console and the replay unharmed). Plus the loopback-only rule, in process."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from broker.config import Settings
from console.access import SESSION_COOKIE
from console.app import create_app
from console.state import ConsoleState
from messages.audit import AuditPage, AuditQuery
from supervision.tree import child_pid
from tests.conftest import Spawn, wait_until
from tests.integration.console_kit import console_system
from tests.integration.probes import ready_agent
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


def test_a_token_guards_every_api_call_and_the_stream(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path, LEA_CONSOLE_TOKEN=TOKEN)
    guarded = ["/api/health", "/api/replays", "/api/replays/r1", "/api/replays/r1/timeline",
               "/api/screenshots/" + "0" * 64, "/api/events"]
    with httpx.Client(base_url=url, timeout=10) as anonymous:
        for path in guarded:  # from loopback too: a local proxy must not open the door
            error_of(anonymous.get(path), 401, "token_required")
            error_of(anonymous.get(path, headers={"Authorization": "Bearer wrong"}), 401,
                     "token_required")
        error_of(anonymous.post("/api/replays/r1/resume", json={"operator": "x"}), 401,
                 "token_required")
        anonymous.cookies.set(SESSION_COOKIE, TOKEN)  # the token is not the session value
        error_of(anonymous.post("/api/replays/r1/cancel", json={"operator": "x"}), 401,
                 "token_required")
        anonymous.cookies.clear()
        page = anonymous.get("/")
        assert page.status_code == 401 and "Code d'accès" in page.text
        assert "replay-rows" not in page.text  # no data on the sign-in page
        error_of(anonymous.post("/api/session", json={"token": "wrong"}), 401, "token_invalid")

    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, timeout=10, headers=bearer) as scripted:
        assert scripted.get("/api/replays").json() == {"replays": [], "dispatcher": "ok"}
        assert first_event(scripted)[0] == "event: snapshot"

    with httpx.Client(base_url=url, timeout=10) as browser:
        signed = browser.post("/api/session", json={"token": TOKEN})
        assert signed.status_code == 204
        cookie = browser.cookies[SESSION_COOKIE]
        assert TOKEN not in cookie  # an HMAC of it, not the token
        assert "httponly" in signed.headers["set-cookie"].lower()
        assert "samesite=strict" in signed.headers["set-cookie"].lower()
        assert browser.get("/api/health").json()["dispatcher"] == "ok"
        assert browser.get("/").status_code == 200
        lines = first_event(browser)
        assert lines[0] == "event: snapshot" and any(x.startswith("data: ") for x in lines)

        # The console is a child of the tree: killed, it is started again, and the session
        # (an HMAC of the token, nothing kept in memory) still opens it.
        killed = system.kill("console")
        wait_until(lambda: child_pid(system.tree.pid, "console") not in (None, killed))

        def serving() -> bool:
            try:
                return browser.get("/api/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(serving, timeout=20, interval=0.1)


def test_bad_input_gets_a_clear_4xx_and_harms_nothing(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path)
    replay_id = paused_replay(system)
    resume = f"/api/replays/{replay_id}/resume"
    with httpx.Client(base_url=url, timeout=10) as c:
        error_of(c.get("/api/replays/no-such-replay"), 404, "not_found")
        error_of(c.get("/api/replays/no-such-replay/timeline"), 404, "not_found")
        error_of(c.post("/api/replays/no-such-replay/resume", json={"operator": "x"}), 404,
                 "not_found")
        error_of(c.post("/api/replays/no-such-replay/cancel", json={"operator": "x"}), 404,
                 "not_found")
        error_of(c.get("/api/replays/bad%20id%3F"), 422, "invalid_request")
        error_of(c.post(resume, content=b"{not json", headers={
            "Content-Type": "application/json"}), 400, "invalid_json")
        error_of(c.post(resume, data={"operator": "x"}), 415, "unsupported_media_type")
        missing_operator = error_of(c.post(resume, json={}), 422, "invalid_request")
        assert "operator" in missing_operator["message"]
        error_of(c.post(resume, json={"operator": "   "}), 422, "invalid_request")
        error_of(c.post(resume, json={"operator": "x", "acknowledged_check_ids": "chk_a"}),
                 422, "invalid_request")
        error_of(c.post(resume, json={"operator": "x", "force": True}), 422,
                 "invalid_request")
        error_of(c.post(resume, json={"operator": "x"}, headers={
            "Origin": "http://evil.example"}), 403, "cross_origin")
        refused = error_of(c.post(resume, json={
            "operator": "x", "acknowledged_check_ids": ["chk_a"]}), 400,
            "required_checks_missing")
        assert refused["missing"] == ["chk_b"]  # spec/01 §6.2's body
        error_of(c.post(resume, json={"operator": "x", "acknowledged_check_ids": [
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
        done = c.post(resume, json={"operator": "Dr Test",
                                    "acknowledged_check_ids": ["chk_a", "chk_b"]})
        assert done.status_code == 200 and done.json()["status"] == "resumed", done.text
        error_of(c.post(resume, json={"operator": "x"}), 409, "not_paused")
        system.wait_status(replay_id, "completed", timeout=30)
        error_of(c.post(f"/api/replays/{replay_id}/cancel", json={"operator": "x"}), 409,
                 "not_running")
        spec = c.get("/api/openapi.json").json()
        assert "/api/replays/{replay_id}/resume" in spec["paths"]
        assert c.get("/api/health").status_code == 200  # still serving


def test_without_a_token_only_this_machine_is_served() -> None:
    """In process (nothing listens, no request leaves): the app's own access rule."""
    settings = Settings(mdp_endpoint="tcp://127.0.0.1:9", bus_out_endpoint="tcp://127.0.0.1:9")
    app = create_app(settings)
    app.state.console = ConsoleState.build(settings)  # no lifespan: nothing is called
    try:
        remote = TestClient(app, client=("192.0.2.7", 40000), base_url="http://192.0.2.1:8765")
        denied = remote.get("/api/replays")
        assert denied.status_code == 403 and denied.json()["error"] == "loopback_only"
        assert remote.get("/").status_code == 403
        local = TestClient(app, client=("127.0.0.1", 40000), base_url="http://evil.example")
        rebound = local.get("/api/replays")  # DNS rebinding: a page of another name
        assert rebound.status_code == 403 and rebound.json()["error"] == "host_not_allowed"
    finally:
        app.state.console.link.close()
