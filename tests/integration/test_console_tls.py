"""The console over TLS, in a real Chromium: the tree serves it beyond loopback with its own
certificate (a throwaway self-signed one made here; Chromium is told to accept it with
``--ignore-certificate-errors``, in this test only), the session cookie is ``Secure``, the
API's description needs a sign-in, nothing answers in clear on its port, a page reached under
a name that is not the console's (DNS rebinding) is refused; and without TLS the tree does
not start beyond loopback, saying why.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, Spawn, free_port, python_argv
from tests.integration.console_kit import (
    PASSWORD,
    add_account,
    chromium,
    console_system,
    shoot,
    sign_in,
)
from tests.tls_certs import self_signed

TOKEN = "a-token-for-the-tls-tests-0123"
CERT_NAME = "lea-console.test"


def test_the_console_is_served_over_https_with_secure_cookies(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    cert, key = self_signed(tmp_path / "tls", (CERT_NAME, "localhost"), ("127.0.0.1",))
    system, url = console_system(spawn, lea_env, tmp_path, LEA_CONSOLE_HOST="0.0.0.0",
                                 LEA_CONSOLE_TOKEN=TOKEN, LEA_CONSOLE_TLS_CERT=str(cert),
                                 LEA_CONSOLE_TLS_KEY=str(key))
    port = url.rsplit(":", 1)[1]
    add_account(system, "dr.martin", "operator")

    with httpx.Client(base_url=url, timeout=10, verify=False) as client:
        # The API's description names every route: a sign-in first.
        described = client.get("/api/openapi.json")
        assert described.status_code == 401, described.text
        assert described.json()["error"] == "login_required"
        login = client.post("/api/login", json={"account": "dr.martin", "password": PASSWORD})
        assert login.status_code == 200, login.text
        cookie = login.headers["set-cookie"].lower()
        assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
        assert login.headers["strict-transport-security"].startswith("max-age=")
        described = client.get("/api/openapi.json")
        assert described.status_code == 200
        assert "/api/replays/{replay_id}/resume" in described.json()["paths"]
        # The Host check stays on beyond loopback: a name that is not the console's.
        refused = client.get("/api/me", headers={"Host": f"evil.example:{port}"})
        assert (refused.status_code, refused.json()["error"]) == (403, "host_not_allowed")
        assert client.get("/api/me", headers={"Host": f"{CERT_NAME}:{port}"}).status_code == 200
    # Nothing is served in clear on the console's port.
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=5)

    rules = f"MAP {CERT_NAME} 127.0.0.1, MAP evil.example 127.0.0.1"
    with chromium(tmp_path, "--ignore-certificate-errors",
                  f"--host-resolver-rules={rules}") as browser:
        page = browser.new_page()
        page.goto(f"https://{CERT_NAME}:{port}/")
        shoot(page, "20-tls-sign-in")
        sign_in(page, "dr.martin")
        expect(page.locator("header .operator-name")).to_have_text("dr.martin")
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        assert page.evaluate("location.protocol") == "https:"
        (session,) = [c for c in browser.cookies() if c["name"] == "lea_console_session"]
        assert session["secure"] and session["httpOnly"] and session["sameSite"] == "Strict"
        shoot(page, "21-tls-signed-in")

        # A page of another site whose name now leads to the console (DNS rebinding).
        other = browser.new_page()
        answer = other.goto(f"https://evil.example:{port}/")
        assert answer is not None and answer.status == 403
        expect(other.locator("h1")).to_have_text("Accès refusé")
        expect(other.locator("body")).not_to_contain_text("dr.martin")


@pytest.mark.parametrize(("env", "said"), [
    ({"LEA_CONSOLE_HOST": "0.0.0.0", "LEA_CONSOLE_TOKEN": TOKEN}, "in clear"),
    ({"LEA_CONSOLE_TLS_CERT": "/nonexistent/console.crt",
      "LEA_CONSOLE_TLS_KEY": "/nonexistent/console.key"}, "no such file"),
])
def test_the_tree_does_not_start_with_the_console_in_clear_or_a_bad_certificate(
        lea_env: dict[str, str], tmp_path: Path, env: dict[str, str], said: str) -> None:
    done = subprocess.run(python_argv("run.py"), cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**lea_env, "LEA_DATA_DIR": str(tmp_path / "var"),
                               "LEA_CONSOLE_PORT": str(free_port()), **env})
    assert done.returncode == 2, done.stderr
    assert "error: console:" in done.stderr and said in done.stderr
