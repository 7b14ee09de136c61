"""The sign-in form a browser posts itself (console/pages.py, ``POST /signin``), through the
console's app in this process (nothing else is called): a good password goes back to the page
asked for, only ever a page of this console; a form from another site is refused; a refusal
is the sign-in page again, saying why, with the name kept and the password never echoed.
"""

from __future__ import annotations

import time
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from console.access import SESSION_COOKIE
from console.accounts import hash_password
from tests.integration.console_kit import PASSWORD, app_in_process


def local(app: FastAPI, follow_redirects: bool = True) -> TestClient:
    """A browser on the server itself."""
    return TestClient(app, client=("127.0.0.1", 40000), base_url="http://127.0.0.1:8765",
                      follow_redirects=follow_redirects)


FORM = {"account": "dr.martin", "password": PASSWORD, "next": "/replays/r1"}


def test_the_sign_in_form_posts_and_goes_back_only_to_a_page_of_the_console(
        tmp_path: Path) -> None:
    with app_in_process(tmp_path) as app:
        app.state.console.accounts.add("dr.martin", "operator", hash_password(PASSWORD),
                                       time.time(), {})
        browser = local(app, follow_redirects=False)
        signed = browser.post("/signin", data=FORM, headers={"Origin": "null",
                                                             "Sec-Fetch-Site": "same-origin"})
        assert signed.status_code == 303 and signed.headers["location"] == "/replays/r1"
        assert PASSWORD not in signed.headers["location"]
        assert "httponly" in signed.headers["set-cookie"].lower()
        assert browser.cookies.get(SESSION_COOKIE)
        for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example",
                          "/signin"):
            again = local(app, follow_redirects=False)
            moved = again.post("/signin", data={**FORM, "next": elsewhere})
            assert (moved.status_code, moved.headers["location"]) == (303, "/"), elsewhere

        wrong = local(app).post(
            "/signin", data={**FORM, "password": "not my password 123"})
        assert wrong.status_code == 401
        assert "Identifiant ou mot de passe incorrect." in wrong.text
        assert 'value="dr.martin"' in wrong.text and "not my password" not in wrong.text
        assert 'method="post"' in wrong.text and 'value="/replays/r1"' in wrong.text

        for headers in ({"Sec-Fetch-Site": "cross-site"},
                        {"Origin": "https://evil.example"}):
            forged = local(app).post(
                "/signin", data=FORM, headers=headers)
            assert forged.status_code == 403, headers
            assert "ne vient pas de Léa" in forged.text
            assert SESSION_COOKIE not in forged.cookies
        assert local(app).post(
            "/signin", data={"account": "dr.martin"}).status_code == 401
