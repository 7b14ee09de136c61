"""What the supervisor console's tests share: a tree whose console listens on a free port,
Debian's chromium driven by Playwright, and screenshots kept under tests/artifacts/console/.

Playwright never downloads a browser here: it launches /usr/bin/chromium (scripts/test
installs it) with a fresh profile per test.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.conftest import ROOT, Spawn, free_port, wait_until
from tests.integration.probes import cli
from tests.integration.system import System

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"


def console_system(spawn: Spawn, env: dict[str, str], tmp: Path,
                   **extra_env: str) -> tuple[System, str]:
    """The tree (``python run.py``, console included) and the console's base URL, once the
    console answers."""
    port = free_port()
    system = System(spawn, env, tmp, {"LEA_CONSOLE_PORT": str(port), **extra_env})
    url = f"http://127.0.0.1:{port}"
    token = extra_env.get("LEA_CONSOLE_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def up() -> bool:
        try:
            return httpx.get(f"{url}/api/health", headers=headers, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=20, interval=0.1)
    return system, url


@contextlib.contextmanager
def chromium(tmp: Path) -> Iterator[BrowserContext]:
    """A Playwright browser context on Debian's chromium, with a fresh profile."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test installs the chromium package")
    from playwright.sync_api import sync_playwright

    profile = tmp / "chromium-profile"
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            locale="fr-FR", viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)


def shoot(page: Page, name: str) -> None:
    """Keep a screenshot of the whole page for people to look at (CI artefact)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def sign_in_operator(page: Page, name: str) -> None:
    """Answer the "who supervises?" question the console asks once per browser."""
    dialog = page.locator("#operator-dialog")
    dialog.wait_for(state="visible")
    page.fill("#operator-input", name)
    page.click("#operator-form button[type=submit]")
    dialog.wait_for(state="hidden")


def audit_records(system: System, replay_id: str, kind: str) -> list[dict[str, Any]]:
    """The replay's audit records of ``kind``, as ``python run.py audit show --json`` says."""
    shown = cli(system, "audit", "show", replay_id, "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    return [r for r in records if r["kind"] == kind]
