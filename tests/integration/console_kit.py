"""What the supervisor console's tests share: a tree whose console listens on a free port,
operator accounts made with ``run.py accounts add`` and signed in (API or page), Debian's
chromium driven by Playwright, and screenshots kept under tests/artifacts/console/.

Playwright never downloads a browser here: it launches /usr/bin/chromium (scripts/test
installs it) with a fresh profile per test.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import FastAPI

from console.app import create_app
from console.state import ConsoleState
from runtime.settings import Settings
from tests.conftest import ROOT, Spawn, free_port, python_argv, wait_until
from tests.integration.probes import cli, ready_agent
from tests.integration.system import System, workflow

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CHROMIUM = "/usr/bin/chromium"
_profiles = itertools.count()
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
PASSWORD = "a password for the tests"


def console_system(spawn: Spawn, env: dict[str, str], tmp: Path,
                   **extra_env: str) -> tuple[System, str]:
    """The tree (``python run.py``, console included) and the console's base URL, once the
    console answers."""
    port = free_port()
    system = System(spawn, env, tmp, {"LEA_CONSOLE_PORT": str(port), **extra_env})
    scheme = "https" if extra_env.get("LEA_CONSOLE_TLS_CERT") else "http"
    url = f"{scheme}://127.0.0.1:{port}"

    def up() -> bool:  # it answers (a sign-in is needed: 401 is an answer)
        try:  # the tests' certificates are their own: not checked here
            return httpx.get(f"{url}/api/health", timeout=2,
                             verify=False).status_code in (200, 401)
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=20, interval=0.1)
    return system, url


@contextlib.contextmanager
def app_in_process(tmp: Path) -> Iterator[FastAPI]:
    """The console's app without its lifespan (nothing listens, nothing is called), for its
    access rules under fastapi's TestClient."""
    settings = Settings(mdp_endpoint="tcp://127.0.0.1:9", bus_out_endpoint="tcp://127.0.0.1:9",
                        data_dir=tmp)
    app = create_app(settings)
    app.state.console = ConsoleState.build(settings)
    try:
        yield app
    finally:
        app.state.console.close()


@contextlib.contextmanager
def chromium(tmp: Path, *extra_args: str, **options: Any) -> Iterator[BrowserContext]:
    """A Playwright browser context on Debian's chromium, with a fresh profile (and
    ``extra_args`` on its command line, ``options`` for the context)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test installs the chromium package")
    from playwright.sync_api import sync_playwright

    profile = tmp / f"chromium-profile-{next(_profiles)}"
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args],
            headless=True, locale="fr-FR", viewport={"width": 1280, "height": 900},
            **options)
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)


def shoot(page: Page, name: str) -> None:
    """Keep a screenshot of the whole page for people to look at (CI artefact)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def add_account(system: System, name: str, role: str, password: str = PASSWORD) -> None:
    """``python run.py accounts add NAME --role ROLE``, the password on standard input."""
    done = subprocess.run(python_argv("run.py", "accounts", "add", name, "--role", role),
                          env=system.env, cwd=ROOT, input=f"{password}\n", text=True,
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def sign_in(page: Page, name: str, password: str = PASSWORD) -> None:
    """Sign in on the console's sign-in page (the page the console shows without a
    session); returns once the page shows the account."""
    page.locator("#signin-form").wait_for(state="visible")
    page.fill("#signin-account", name)
    page.fill("#signin-password", password)
    page.click("#signin-form button[type=submit]")
    page.locator(f'body[data-account="{name}"]').wait_for(state="attached")


@contextlib.contextmanager
def signed_in(url: str, name: str, password: str = PASSWORD) -> Iterator[httpx.Client]:
    """An HTTP client with the session of ``name`` (POST /api/login)."""
    with httpx.Client(base_url=url, timeout=10, verify=False) as client:
        reply = client.post("/api/login", json={"account": name, "password": password})
        assert reply.status_code == 200, reply.text
        yield client


def console_records(system: System, kind: str | None = None) -> list[dict[str, Any]]:
    """The console's own audit records (sign-ins, refusals, accounts) of ``kind``, as
    ``python run.py audit show --source console --json`` says; [] while there are none."""
    shown = cli(system, "audit", "show", "--source", "console", "--json")
    assert shown.returncode in (0, 1), shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    return [r for r in records if kind is None or r["kind"] == kind]


def audit_records(system: System, replay_id: str, kind: str) -> list[dict[str, Any]]:
    """The replay's audit records of ``kind``, as ``python run.py audit show --json`` says."""
    shown = cli(system, "audit", "show", replay_id, "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    return [r for r in records if r["kind"] == kind]


CHECK_LABEL = "Premier contrôle"
CHECK_INTENTION = "Faire contrôler le dossier du patient"
WORKFLOW_NAME = "Contrôle du dossier"


def paused_at_a_check(system: System, machine_id: str, workflow_id: str) -> str:
    """A replay (a simulated agent ``machine_id``, a workflow named :data:`WORKFLOW_NAME`)
    paused at a step whose intention is :data:`CHECK_INTENTION`, with one required check
    ``chk_a``; its id."""
    ready_agent(system, machine_id)
    checked = {"type": "pause_for_human", "intention": CHECK_INTENTION, "parameters": {
        "message": "Contrôle", "safety_checks": [
            {"id": "chk_a", "label": CHECK_LABEL, "required": True}]}}
    wf = workflow(checked, workflow_id=workflow_id).model_copy(update={"name": WORKFLOW_NAME})
    replay_id = system.start(wf, machine_id)
    system.wait_status(replay_id, "paused_need_help", timeout=30)
    return replay_id
