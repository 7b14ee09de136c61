"""The supervisor console in a real headless Chromium, against the whole tree
(``python run.py`` starts the console), a simulated agent and a stand-in Ollama server.

A clinician's path: she signs in with her operator account; the list shows the replay live;
the pause dialog shows the message, the screen and the checklist; Continue stays disabled
until every required check is ticked; a forced resume with a check missing is refused with a
toast and the pause is kept; the real resume completes the replay, and the audit trail holds
the checks under her account. A loop pause shows the loop detector's signal and evidence,
with Continue / Cancel and no checklist (a viewer's pages: test_console_roles.py); bad
passwords are limited and recorded; an expired session brings the
sign-in page back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cli.ollama_stub import GOOD_CHECKS, OllamaStub
from cli.workflow_cmd import load_workflow
from messages.replay import CancelReplay
from tests.conftest import Spawn, wait_until
from tests.integration.console_kit import (
    PASSWORD,
    add_account,
    audit_records,
    chromium,
    console_records,
    console_system,
    shoot,
    sign_in,
)
from tests.integration.probes import ready_agent
from tests.integration.system import workflow

if TYPE_CHECKING:
    from playwright.sync_api import Locator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "admission_note.json"
PAUSED = "paused_need_help"
WAIT_MS = 20_000  # a functional bound: a replay step here takes well under a second


@pytest.fixture
def stub() -> Iterator[OllamaStub]:
    with OllamaStub("good") as server:
        yield server


def test_a_checklist_pause_is_answered_in_the_browser(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, stub: OllamaStub) -> None:
    from playwright.sync_api import expect

    system, url = console_system(spawn, lea_env, tmp_path, OLLAMA_URL=stub.url)
    add_account(system, "dr.martin", "operator")
    ready_agent(system, "M1")
    with chromium(tmp_path) as browser:
        page = browser.new_page()
        page.goto(url)
        shoot(page, "00-sign-in")
        sign_in(page, "dr.martin")
        expect(page.locator("header .operator-name")).to_have_text("dr.martin")
        expect(page.locator("#live")).to_have_attribute("data-state", "live")

        # The list follows the replay live (the bus, through the stream).
        replay_id = system.start(load_workflow(EXAMPLE), "M1")
        row = page.locator(f'#replay-rows tr[data-replay-id="{replay_id}"]')
        expect(row).to_have_attribute("data-status", PAUSED, timeout=WAIT_MS)
        expect(row.locator('[data-field="status_label"]')).to_have_text(
            "En attente de validation")
        expect(row.locator('[data-field="workflow_label"]')).to_have_text("Note d'admission")
        expect(row.locator('[data-field="step_label"]')).to_have_text(
            "Contrôle humain avant enregistrement")
        expect(page.locator("#waiting")).to_be_visible()
        shoot(page, "01-list-a-replay-waits")

        row.locator('[data-field="link"]').click()
        expect(page.locator("#signin-form")).to_have_count(0)  # signed in once only
        pause = page.locator("#pause")
        expect(pause).to_be_visible()
        expect(page.locator("#pause-message")).to_have_text(
            "Vérifiez l'identité du patient et la note avant l'enregistrement.")
        expect(page.locator("#pause-reason")).to_contain_text("vérification humaine")
        page.wait_for_function(  # the agent's screen at the pause, from the audit trail
            "document.querySelector('#pause-shot-img').naturalWidth > 0", timeout=WAIT_MS)
        checks = page.locator("#check-list li")
        expect(checks).to_have_count(4)

        def check(check_id: str) -> Locator:
            return page.locator(f'#check-list li[data-check-id="{check_id}"]')

        for required in ("chk_identity", "chk_note"):
            expect(check(required).locator(".badge.required")).to_be_visible()
            expect(check(required).locator(".badge.lea")).to_be_hidden()
        for i, suggestion in enumerate(GOOD_CHECKS, start=1):
            item = check(f"llm_{i}")
            expect(item.locator(".check-label")).to_have_text(suggestion["label"])
            expect(item.locator(".badge.lea")).to_be_visible()
            expect(item.locator(".badge.required")).to_be_hidden()
            tip = item.locator(".badge.lea .tip")
            expect(tip).to_be_hidden()
            item.locator(".badge.lea").hover()
            expect(tip).to_be_visible()
            expect(tip).to_contain_text(suggestion["evidence"])

        go_on = page.locator("#continue")
        expect(go_on).to_be_disabled()
        check("chk_identity").locator("input").check()
        expect(go_on).to_be_disabled()
        check("llm_1").locator("input").check()  # a suggestion is not a required check
        expect(go_on).to_be_disabled()
        expect(page.locator("#pause-hint")).to_have_text(
            "Cochez encore 1 vérification obligatoire pour pouvoir continuer.")
        shoot(page, "02-pause-one-required-check-left")

        # Forced: someone enables the button from the browser's devtools and clicks. The
        # dispatcher refuses, the page says so, and the pause (with its ticks) stays.
        # Enabled and clicked in one task: a live update re-rendering the page in between
        # would disable it again, and a click on a disabled button sends nothing.
        page.evaluate("(b => { b.disabled = false; b.click(); })"
                      "(document.querySelector('#continue'))")
        toast = page.locator("#toast")
        expect(toast).to_be_visible()
        expect(toast).to_contain_text("Reprise refusée")
        expect(toast).to_contain_text("Contenu de la note relu")
        shoot(page, "03-forced-resume-refused")
        assert system.status(replay_id).status == PAUSED
        expect(pause).to_be_visible()
        expect(check("chk_identity").locator("input")).to_be_checked()
        expect(go_on).to_be_disabled()

        check("chk_note").locator("input").check()
        expect(go_on).to_be_enabled()
        shoot(page, "04-pause-ready-to-continue")
        go_on.click()
        expect(toast).to_contain_text("Léa reprend")
        head = page.locator("#replay-head")
        expect(head).to_have_attribute("data-status", "completed", timeout=WAIT_MS)
        expect(pause).to_be_hidden()
        expect(page.locator('#timeline li[data-kind="replay_resumed"]')).to_contain_text(
            "Repris par dr.martin", timeout=WAIT_MS)
        expect(page.locator('#timeline li[data-kind="replay_completed"]')).to_have_count(
            1, timeout=WAIT_MS)
        shoot(page, "05-replay-completed-timeline")

        page.goto(url)
        expect(row).to_have_attribute("data-status", "completed")
        expect(row.locator('[data-field="status_label"]')).to_have_text("Terminé")
        expect(page.locator("#waiting")).to_be_hidden()
        shoot(page, "06-list-completed")

    (resumed,) = audit_records(system, replay_id, "replay_resumed")
    assert {k: resumed["data"].get(k) for k in ("operator", "account", "role")} == {
        "operator": "dr.martin", "account": "dr.martin", "role": "operator"}
    assert resumed["data"]["acknowledged_check_ids"] == ["chk_identity", "chk_note", "llm_1"]
    (login,) = console_records(system, "login_succeeded")
    assert login["data"]["account"] == "dr.martin"


def test_a_loop_pause_shows_its_evidence_and_can_be_cancelled(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    system, url = console_system(spawn, lea_env, tmp_path)
    add_account(system, "ide.dupont", "operator")
    # Clicks that change nothing on screen: the same click three times is action_repeat.
    ready_agent(system, "M2", scenario={"types": {"click": {"loop": True}}})
    same = {"type": "click", "target_spec": {"x_pct": 0.4, "y_pct": 0.4}}
    replay_id = system.start(workflow(same, same, same, same, workflow_id="stuck"), "M2")
    system.wait_status(replay_id, PAUSED, timeout=30)

    with chromium(tmp_path) as browser:
        page = browser.new_page()
        page.goto(f"{url}/replays/{replay_id}")
        sign_in(page, "ide.dupont")
        expect(page.locator("#pause")).to_be_visible()
        expect(page.locator("#pause-message")).to_contain_text("Léa semble bloquée")
        expect(page.locator("#pause-reason")).to_contain_text("tourner en rond")
        expect(page.locator("#pause-loop")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#pause-signal")).to_have_text("La même action répétée sans effet")
        evidence = page.locator("#pause-evidence")
        def shown(label: str) -> Locator:
            return evidence.locator(f'dt:text-is("{label}") + dd')

        expect(shown("Actions identiques à la suite")).to_have_text("3")
        expect(shown("Action répétée")).to_have_text("click 0.4,0.4")
        expect(shown("L'écran a changé")).to_have_text("non")
        page.wait_for_function(
            "document.querySelector('#pause-shot-img').naturalWidth > 0", timeout=WAIT_MS)
        # No checklist: the plain message with Continue / Cancel.
        expect(page.locator("#pause-checks")).to_be_hidden()
        expect(page.locator("#continue")).to_be_enabled()
        expect(page.locator("#cancel")).to_be_enabled()
        shoot(page, "07-loop-pause-evidence")

        page.once("dialog", lambda dialog: dialog.accept())  # "Arrêter définitivement ?"
        page.locator("#cancel").click()
        expect(page.locator("#toast")).to_contain_text("Le replay est arrêté.")
        # Cancelled at a pause a failure caused (a loop): the replay ended failed.
        expect(page.locator("#replay-head")).to_have_attribute("data-status", "failed",
                                                               timeout=WAIT_MS)
        expect(page.locator("#pause")).to_be_hidden()
        shoot(page, "08-loop-replay-cancelled")

    assert system.status(replay_id).status == "failed"
    (cancelled,) = audit_records(system, replay_id, "replay_cancelled")
    assert cancelled["data"]["operator"] == "ide.dupont"
    assert cancelled["data"]["account"] == "ide.dupont"
    assert cancelled["data"]["outcome"] == "failed"
    (paused,) = audit_records(system, replay_id, "replay_paused")
    assert paused["data"]["detail"]["signal"] == "action_repeat"


@pytest.mark.long  # limits: test_console_api.py
def test_bad_passwords_are_limited_and_recorded(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    system, url = console_system(spawn, lea_env, tmp_path, LEA_CONSOLE_LOGIN_MAX_FAILURES="3")
    add_account(system, "dr.martin", "operator")
    with chromium(tmp_path) as browser:
        page = browser.new_page()
        page.goto(url)
        toast = page.locator("#toast")

        def try_password(password: str) -> None:
            """One sign-in, once the previous answer was shown (its toast is cleared)."""
            page.evaluate("document.querySelector('#toast').textContent = ''")
            page.fill("#signin-account", "dr.martin")
            page.fill("#signin-password", password)
            page.click("#signin-form button[type=submit]")

        for attempt in range(3):
            try_password(f"not my password {attempt}")
            expect(toast).to_have_text("Identifiant ou mot de passe incorrect.",
                                       timeout=WAIT_MS)
        # The right password now waits too: the limit is reached before it is looked at.
        try_password(PASSWORD)
        expect(toast).to_contain_text("Trop d'essais manqués", timeout=WAIT_MS)
        expect(page.locator("#signin-form")).to_be_visible()
        shoot(page, "11-sign-in-rate-limited")

    wait_until(lambda: console_records(system, "login_rate_limited"), timeout=20,
               interval=0.2)
    failed = console_records(system, "login_failed")
    assert [(r["data"]["account"], r["data"]["reason"]) for r in failed] == [
        ("dr.martin", "bad_password")] * 3
    assert [r["data"]["failures_in_window"] for r in failed] == [1, 2, 3]
    (limited,) = console_records(system, "login_rate_limited")
    assert (limited["data"]["account"], limited["data"]["limit"]) == ("dr.martin", "account")
    assert console_records(system, "login_succeeded") == []


@pytest.mark.long  # expiry: test_console_accounts.py
def test_an_expired_session_is_refused_and_the_sign_in_comes_back(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    system, url = console_system(spawn, lea_env, tmp_path,
                                 LEA_CONSOLE_SESSION_LIFETIME_S="4")
    add_account(system, "ide.dupont", "operator")
    with chromium(tmp_path) as browser:
        page = browser.new_page()
        page.goto(url)
        sign_in(page, "ide.dupont")

        def refused() -> bool:
            reply = page.request.get(f"{url}/api/replays")
            return reply.status == 401 and reply.json()["error"] == "session_expired"

        wait_until(refused, timeout=30, interval=0.5)
        # The open page follows: its stream ends, and the sign-in page says why.
        expect(page.locator("#signin-why")).to_have_attribute("data-why", "session_expired",
                                                              timeout=WAIT_MS)
        shoot(page, "12-session-expired")

    wait_until(lambda: console_records(system, "session_expired"), timeout=20, interval=0.2)
    (expired,) = console_records(system, "session_expired")
    (login,) = console_records(system, "login_succeeded")
    assert expired["data"]["account"] == "ide.dupont"
    assert expired["data"]["session"] == login["data"]["session"]


def test_an_operator_pauses_a_running_replay_from_its_page(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    system, url = console_system(spawn, lea_env, tmp_path)
    add_account(system, "ide.dupont", "operator")
    ready_agent(system, "M4")
    # Long enough for a person to click while it runs; the pause comes after the step in
    # flight (D8).
    step = {"type": "wait", "parameters": {"duration_ms": 10_000}}
    replay_id = system.start(workflow(step, step, step, step, workflow_id="long"), "M4")
    with chromium(tmp_path) as browser:
        page = browser.new_page()
        page.goto(f"{url}/replays/{replay_id}")
        sign_in(page, "ide.dupont")
        pause_now = page.locator("#pause-now")
        expect(pause_now).to_be_visible(timeout=WAIT_MS)
        expect(pause_now).to_be_enabled()
        pause_now.click()
        expect(page.locator("#toast")).to_contain_text("se met en pause")
        expect(page.locator("#replay-head")).to_have_attribute("data-status", PAUSED,
                                                               timeout=30_000)
        expect(page.locator("#pause")).to_be_visible()
        expect(pause_now).to_be_hidden()
        shoot(page, "13-operator-paused")
    (paused,) = audit_records(system, replay_id, "replay_paused")
    assert paused["data"]["reason"] == "operator"
    assert (paused["data"]["detail"]["account"], paused["data"]["detail"]["role"]) == (
        "ide.dupont", "operator")
    system.call("dispatcher", CancelReplay(replay_id=replay_id, operator="test"))
