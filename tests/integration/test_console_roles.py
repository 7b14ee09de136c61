"""What each role sees at the console, in a real Chromium against the whole tree: a viewer
is shown read-only pages (nothing to tick, no « Répondre », no text telling them to act),
an operator and an admin are asked to answer; lists and pages show the workflow's name and
the step's intention; the sign-in page says whom to ask, and its form is a POST that signs
in without the page's script, never putting the password in an address.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import Spawn, wait_until
from tests.integration.console_kit import (
    CHECK_INTENTION,
    CHECK_LABEL,
    PASSWORD,
    WORKFLOW_NAME,
    add_account,
    audit_records,
    chromium,
    console_system,
    paused_at_a_check,
    shoot,
    sign_in,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

PAUSED = "paused_need_help"
CONTACT = "le service informatique, poste 4242"
WAIT_MS = 20_000


def test_each_role_sees_what_it_may_do_and_the_sign_in_works_without_its_script(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    system, url = console_system(spawn, lea_env, tmp_path, LEA_CONSOLE_HELP_CONTACT=CONTACT)
    for name, role in (("obs.durand", "viewer"), ("ide.dupont", "operator"),
                       ("chef.lea", "admin")):
        add_account(system, name, role)
    replay_id = paused_at_a_check(system, "M3", "observed")
    replay_url = f"{url}/replays/{replay_id}"

    # Without the page's script: the form is posted by the browser itself.
    with chromium(tmp_path, java_script_enabled=False) as browser:
        page = browser.new_page()
        page.goto(replay_url)
        form = page.locator("#signin-form")
        expect(form).to_have_attribute("method", "post")
        expect(page.locator("#signin-help")).to_contain_text(CONTACT)
        expect(page.locator("main")).not_to_contain_text("run.py")
        page.fill("#signin-account", "ide.dupont")
        page.fill("#signin-password", "not my password")
        page.click("#signin-form button[type=submit]")
        expect(page.locator("#signin-why")).to_have_text("Identifiant ou mot de passe incorrect.")
        assert "password" not in page.url and "not my" not in page.url
        shoot(page, "30-sign-in-without-script-refused")
        page.fill("#signin-password", PASSWORD)
        page.click("#signin-form button[type=submit]")
        page.locator('body[data-account="ide.dupont"]').wait_for(state="attached")
        assert page.url == replay_url  # back to the page asked for, nothing in the address
        expect(page.locator("#pause")).to_be_attached()

    with chromium(tmp_path) as browser:
        page = browser.new_page()
        page.goto(url)
        sign_in(page, "obs.durand")
        see_the_list(page, replay_id, may_answer=False)
        shoot(page, "31-viewer-list")
        page.goto(replay_url)
        pause = page.locator("#pause")
        expect(pause).to_be_visible()
        expect(page.locator("#pause-title")).to_have_text("Léa attend la réponse d'un opérateur")
        expect(page.locator("#check-list li .check-label")).to_have_text(CHECK_LABEL)
        expect(page.locator("#pause input")).to_have_count(0)  # nothing to tick
        for button in ("#continue", "#cancel", "#redo", "#pause-now"):
            expect(page.locator(button)).to_have_count(0)
        expect(page.locator("#read-only")).to_be_visible()
        for said in ("vous pouvez continuer", "Cochez", "cochez-la", "Répondre"):
            expect(page.locator("main")).not_to_contain_text(said)
        expect(page.locator("#pause-step-intention")).to_have_text(CHECK_INTENTION)
        shoot(page, "32-viewer-pause-read-only")
        # Forced from the browser's devtools: the server refuses, and records it.
        forced = page.evaluate("""async (base) => {
            const r = await fetch(base + "/resume", {method: "POST", headers: {
                "Content-Type": "application/json"},
                body: JSON.stringify({acknowledged_check_ids: ["chk_a"]})});
            return [r.status, (await r.json()).error];
        }""", f"/api/replays/{replay_id}")
        assert forced == [403, "role_forbidden"]
        sign_out(page)

        for name in ("ide.dupont", "chef.lea"):
            sign_in(page, name)
            page.goto(url)
            see_the_list(page, replay_id, may_answer=True)
            shoot(page, f"33-{name}-list")
            page.goto(replay_url)
            expect(page.locator("#pause-title")).to_have_text("Léa attend votre réponse")
            box = page.locator('#check-list li[data-check-id="chk_a"] input')
            expect(box).to_be_enabled()
            expect(page.locator("#continue")).to_be_disabled()
            expect(page.locator("#read-only")).to_have_count(0)
            box.check()
            expect(page.locator("#continue")).to_be_enabled()
            expect(page.locator("#pause-hint")).to_contain_text("vous pouvez continuer")
            shoot(page, f"34-{name}-pause")
            accounts = page.evaluate("fetch('/api/accounts').then((r) => r.status)")
            assert accounts == (200 if name == "chef.lea" else 403)
            if name == "chef.lea":
                page.locator("#continue").click()
                expect(page.locator("#replay-head")).to_have_attribute(
                    "data-status", "completed", timeout=WAIT_MS)
            else:
                sign_out(page)

    (resumed,) = audit_records(system, replay_id, "replay_resumed")
    assert (resumed["data"]["account"], resumed["data"]["role"]) == ("chef.lea", "admin")
    wait_until(lambda: audit_records(system, replay_id, "request_refused"), timeout=20,
               interval=0.2)
    (refused,) = audit_records(system, replay_id, "request_refused")
    assert (refused["source"], refused["data"]["account"], refused["data"]["role"]) == (
        "console", "obs.durand", "viewer")


def see_the_list(page: Page, replay_id: str, may_answer: bool) -> None:
    """The list names the workflow and the step's intention, and asks to answer only those
    who may."""
    from playwright.sync_api import expect

    row = page.locator(f'#replay-rows tr[data-replay-id="{replay_id}"]')
    expect(row).to_have_attribute("data-status", PAUSED, timeout=WAIT_MS)
    expect(row.locator('[data-field="workflow_label"]')).to_have_text(WORKFLOW_NAME)
    expect(row.locator('[data-field="step_label"]')).to_have_text(CHECK_INTENTION)
    expect(row.locator('[data-field="link"]')).to_have_text(
        "Répondre" if may_answer else "Détails")
    waiting = page.locator("#waiting")
    expect(waiting).to_be_visible()
    if may_answer:
        expect(waiting).to_contain_text("votre validation")
    else:
        expect(waiting).to_contain_text("la réponse d'un opérateur")
        expect(page.locator("main")).not_to_contain_text("Répondre")


def sign_out(page: Page) -> None:
    page.locator("#logout").click()
    page.locator("#signin-form").wait_for(state="visible")
