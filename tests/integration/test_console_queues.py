"""The console's work queues page in a real headless Chromium, against the whole tree
(``python run.py``), a simulated agent of the queue's pool and the ``queue`` commands
(docs/queues.md, "At the console").

- an operator adds a file with a refused row: the page lists every refused row (a
  sensitive value never shown) and nothing is added; the corrected file adds every item;
  the same file again is refused by the dispatcher, row by row (already in the queue);
- a viewer reads the items and opens one (its sensitive input masked), and that view is in
  the audit trail under the viewer's account (``audit access --item``); its retry, forced
  from the browser, is refused by the server and the item does not change;
- an operator skips (its cancel, forced, is refused), an admin cancels, an operator
  retries; the dispatcher's records name the signed-in person;
- once an agent of the pool comes, the items are done: the page shows the agent, the
  values read and each item's history; /metrics counts the items by state and the agents by
  pool.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from messages.queue import QueueReply, ShowQueue
from tests.conftest import Spawn, wait_until
from tests.integration.console_kit import (
    add_account,
    chromium,
    console_records,
    console_system,
    shoot,
    sign_in,
)
from tests.integration.probes import cli
from tests.integration.system import System

if TYPE_CHECKING:
    from playwright.sync_api import Page

WAIT_MS = 20_000
SEJOUR = "2026-004217"
NIR = "1850275123456"
FORCED = """async ([path, reference]) => {
    const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                                 body: JSON.stringify({reference})});
    return [r.status, (await r.json()).error];
}"""


def queue_workflow(path: Path) -> Path:
    """Read the stay number beside its label, type the IPP; ``nir`` is sensitive."""
    path.write_text(json.dumps({
        "workflow_id": "admission_console", "inputs": [
            {"name": "ipp", "pattern": r"\d{6}"}, {"name": "nir", "sensitive": True}],
        "actions": [
            {"action_id": "read", "type": "read_text",
             "parameters": {"output": "sejour", "label": "N° de séjour",
                            "pattern": r"\d{4}-\d{6}"}},
            {"action_id": "type_ipp", "type": "type",
             "target_spec": {"x_pct": 0.3, "y_pct": 0.2}, "parameters": {"text": "{{ipp}}"}}]}))
    return path


def csv_file(path: Path, rows: list[str]) -> Path:
    """As a French Excel saves it: ``;`` and Windows-1252."""
    path.write_bytes(("\r\n".join(["reference;ipp;nir", *rows]) + "\r\n").encode("cp1252"))
    return path


def items(system: System) -> dict[str, dict[str, Any]]:
    reply = system.call("dispatcher", ShowQueue(queue="admissions"), timeout_s=10)
    assert isinstance(reply, QueueReply), reply
    return {i["reference"]: i for i in reply.items}


def waiting_s(page: Page) -> float:
    """The age of the oldest waiting item, as /metrics says it (the session's look)."""
    text: str = page.evaluate("fetch('/metrics').then((r) => r.text())")
    found = re.search(r'^lea_queue_oldest_waiting_seconds\{queue="admissions"\} (\S+)$', text,
                      re.M)
    return float(found.group(1)) if found else 0.0


def sign_out(page: Page) -> None:
    page.click("#logout")
    page.locator("#signin-form").wait_for(state="visible")


def test_the_queues_page_adds_reads_and_commands_by_role(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    system, url = console_system(spawn, lea_env, tmp_path, RPA_LOOP_DETECTOR_ENABLED="false")
    for name, role in (("obs.durand", "viewer"), ("ide.dupont", "operator"),
                       ("chef.lea", "admin")):
        add_account(system, name, role)
    made = cli(system, "queue", "create", "admissions", "--workflow",
               str(queue_workflow(tmp_path / "wf.json")), "--pool", "ward", "--operator", "ide")
    assert made.returncode == 0, made.stderr
    bad = csv_file(tmp_path / "bad.csv", [f"adm-001;004217;{NIR}", f"adm-002;12AB;{NIR}",
                                          f"adm-001;004219;{NIR}"])
    good = csv_file(tmp_path / "good.csv", [f"adm-00{n};00421{n};{NIR}" for n in (1, 2, 3)])
    queue_url = f"{url}/queues/admissions"

    def row(page: Page, reference: str) -> Any:
        return page.locator(f'#item-rows tr[data-reference="{reference}"]')

    with chromium(tmp_path) as browser:
        page = browser.new_page()
        page.goto(f"{url}/queues")
        sign_in(page, "ide.dupont")
        expect(page.locator('#queue-rows tr[data-queue="admissions"]')).to_be_visible()
        page.click('#queue-rows tr[data-queue="admissions"] a')
        expect(page.locator("#queue-head")).to_have_attribute("data-queue", "admissions")

        # A refused file: every refused row listed, nothing added.
        page.set_input_files("#add-file-input", str(bad))
        page.click("#add-submit")
        report = page.locator("#file-report")
        expect(report).to_be_visible(timeout=WAIT_MS)
        expect(report).to_contain_text("aucun élément n'a été ajouté")
        refused = page.locator("#file-rows tbody tr")
        expect(refused).to_have_count(2)
        expect(page.locator('#file-rows tr[data-row="2"]')).to_contain_text("adm-002")
        expect(page.locator('#file-rows tr[data-row="2"]')).to_contain_text("ipp")
        expect(page.locator('#file-rows tr[data-row="3"]')).to_contain_text("adm-001")
        expect(report).not_to_contain_text(NIR)
        shoot(page, "40-queue-file-refused")
        assert items(system) == {}
        expect(page.locator("#no-items")).to_be_visible()

        page.set_input_files("#add-file-input", str(good))
        page.click("#add-submit")
        expect(page.locator("#toast")).to_contain_text("3 élément(s) ajouté(s)")
        expect(report).to_be_hidden()
        expect(page.locator("#item-rows tr")).to_have_count(3, timeout=WAIT_MS)
        expect(row(page, "adm-001")).to_have_attribute("data-state", "new")
        # The same file again: the dispatcher refuses every row (already in the queue).
        page.set_input_files("#add-file-input", str(good))
        page.click("#add-submit")
        expect(refused).to_have_count(3, timeout=WAIT_MS)
        expect(page.locator('#file-rows tr[data-row="1"]')).to_contain_text(
            "already in the queue (new)")
        assert len(items(system)) == 3
        # The list carries no values: neither the IPP nor the sensitive one.
        expect(page.locator("#items")).not_to_contain_text("004211")
        expect(row(page, "adm-003").locator('button[data-command="cancel"]')).to_have_count(0)

        row(page, "adm-003").locator('button[data-command="skip"]').click()
        expect(row(page, "adm-003")).to_have_attribute("data-state", "skipped",
                                                       timeout=WAIT_MS)
        forced = page.evaluate(FORCED, ["/api/queues/admissions/cancel", "adm-002"])
        assert forced == [403, "role_forbidden"]
        assert items(system)["adm-002"]["state"] == "new"
        shoot(page, "41-queue-operator")
        sign_out(page)

        # A viewer reads, opens an item (recorded), and cannot change anything.
        sign_in(page, "obs.durand")
        page.goto(queue_url)
        expect(page.locator("#read-only")).to_be_visible()
        expect(page.locator("#add-form")).to_have_count(0)
        expect(page.locator("#items button.command")).to_have_count(0)
        row(page, "adm-001").locator("button.open-item").click()
        detail = page.locator("#item")
        expect(detail).to_be_visible(timeout=WAIT_MS)
        expect(detail.locator('#item-inputs dd[data-name="ipp"]')).to_have_text("004211")
        expect(detail.locator('#item-inputs dd[data-name="nir"]')).to_have_text("•••")
        expect(page.locator("main")).not_to_contain_text(NIR)
        shoot(page, "42-queue-viewer-item")
        wait_until(lambda: waiting_s(page) > 0, timeout=30)
        forced = page.evaluate(FORCED, ["/api/queues/admissions/retry", "adm-003"])
        assert forced == [403, "role_forbidden"]
        assert items(system)["adm-003"]["state"] == "skipped"
        sign_out(page)

        # An admin cancels; an operator retries the cancelled item.
        sign_in(page, "chef.lea")
        page.goto(queue_url)
        page.once("dialog", lambda dialog: dialog.accept())
        row(page, "adm-002").locator('button[data-command="cancel"]').click()
        expect(row(page, "adm-002")).to_have_attribute("data-state", "cancelled",
                                                       timeout=WAIT_MS)
        sign_out(page)
        sign_in(page, "ide.dupont")
        page.goto(queue_url)
        row(page, "adm-002").locator('button[data-command="retry"]').click()
        expect(row(page, "adm-002")).to_have_attribute("data-state", "new", timeout=WAIT_MS)

        # An agent of the pool comes: the items are done, with the values read.
        agent = system.agent("w1", {"desktop": {
            "banner": f"DUPONT Jean   N° de séjour : {SEJOUR}   Lit 12"}},
            extra_args=["--pool", "ward"])
        for reference in ("adm-001", "adm-002"):
            expect(row(page, reference)).to_have_attribute("data-state", "done",
                                                           timeout=3 * WAIT_MS)
            expect(row(page, reference).locator('[data-field="machine_id"]')).to_have_text("w1")
            expect(row(page, reference).locator('[data-field="output_names"]')).to_have_text(
                "sejour")
        assert agent.executed("type_ipp") == 2
        row(page, "adm-002").locator("button.open-item").click()
        expect(detail.locator('#item-outputs dd[data-name="sejour"]')).to_have_text(SEJOUR)
        history = detail.locator("#item-history li")
        expect(history.locator('[data-field="state_label"]')).to_have_text(
            ["Ajouté à la file", "Annulé", "En attente", "En cours", "Terminé"])
        expect(detail.locator('#item-history li[data-state="in_progress"] a')).to_have_attribute(
            "href", re.compile(r"^/replays/"))
        shoot(page, "43-queue-done-item-history")

        page.goto(f"{url}/queues")
        expect(page.locator('#agent-rows tr[data-machine-id="w1"]')).to_contain_text("ward")
        expect(page.locator('#queue-rows tr[data-queue="admissions"] .count[data-state="done"]')
               ).to_contain_text("2", timeout=WAIT_MS)

        def metrics() -> str:
            text: str = page.evaluate("fetch('/metrics').then((r) => r.text())")
            return text

        wanted = ('lea_queue_items{queue="admissions",state="done"} 2.0',
                  'lea_queue_items{queue="admissions",state="skipped"} 1.0',
                  'lea_queue_oldest_waiting_seconds{queue="admissions"} 0.0',
                  'lea_pool_agents{pool="ward",state="idle"} 1.0')
        wait_until(lambda: all(w in metrics() for w in wanted), timeout=30)

    # The trail: who saw the item, who was refused, who did what.
    views = cli(system, "audit", "access", "--item", "admissions/adm-001", "--json")
    assert views.returncode == 0, views.stderr
    seen = [json.loads(line) for line in views.stdout.splitlines()]
    assert [(v["source"], v["account"], v["role"], v["what"]) for v in seen] == [
        ("console", "obs.durand", "viewer", "queue_item")]
    refusals = {(r["data"]["account"], r["data"]["act"], r["data"].get("queue"))
                for r in console_records(system, "request_refused")}
    assert refusals == {("ide.dupont", "cancel_items", "admissions"),
                        ("obs.durand", "handle_items", "admissions")}
    shown = cli(system, "audit", "show", "--source", "dispatcher", "--json")
    changes = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    by = {(r["data"]["reference"], r["data"]["state"]): (r["data"].get("account"),
                                                         r["data"].get("role"))
          for r in changes if r["kind"] == "queue_item_changed" and r["data"].get("operator")}
    assert by == {("adm-003", "skipped"): ("ide.dupont", "operator"),
                  ("adm-002", "cancelled"): ("chef.lea", "admin"),
                  ("adm-002", "new"): ("ide.dupont", "operator")}
