"""Text targets on a web page through the whole system: broker, actors and an agent started
with ``--executor desktop`` (Tesseract), and Debian's Chromium showing a real window on an
Xvfb display with a window manager (not headless: the agent reads the display's pixels).

The page is served by a real HTTP server in the test; every control, when clicked, tells
that server which it was (its ``data-ctl``). A modal dialog over a form: its "Enregistrer"
(white on blue) is clicked, never the form's "Enregistrer" behind the backdrop. A table
with a "Détail" on every row: the row named by ``near_text`` is clicked; a "Détail" with no
row to say which pauses the replay at once (``ambiguous_target``) and nothing is clicked.
"""

from __future__ import annotations

import html
import http.server
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import reports
from tests.integration.system import System, workflow
from tests.xdisplay import XDisplayFactory

CHROMIUM = "/usr/bin/chromium"
MONITORS = [(1920, 1080, 0, 0)]
PAUSED = "paused_need_help"
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "web_grounding"

pytestmark = pytest.mark.timeout(300)

STYLE = """
body { margin: 0; font-family: 'Liberation Sans', sans-serif; font-size: 14px; color: #222;
       background: #f4f6f8; }
section { background: #fff; margin: 24px; padding: 16px 22px; border: 1px solid #dde2e7; }
h1 { font-size: 20px; }
td { border-bottom: 1px solid #e3e7eb; padding: 7px 10px; }
button { font: inherit; padding: 5px 12px; border: 1px solid #b8c0c8; background: #fff;
         border-radius: 3px; color: #222; }
button.primary { background: #1565c0; border-color: #1565c0; color: #fff; }
.field { display: flex; gap: 12px; margin: 9px 0; }
.field label { width: 170px; }
input { font: inherit; width: 260px; }
.backdrop { position: fixed; inset: 0; background: rgba(0, 0, 0, 0.5); }
.dialog { position: fixed; left: 50%; top: 35%; transform: translate(-50%, -50%);
          background: #fff; padding: 20px 26px; width: 420px; border-radius: 4px; }
.bar { display: flex; gap: 10px; margin-top: 12px; justify-content: flex-end; }
"""
# Every control tells the server it was clicked (a real request, as a page would send).
SCRIPT = """
document.querySelectorAll('[data-ctl]').forEach(function (el) {
  el.addEventListener('click', function () {
    fetch('/click?ctl=' + encodeURIComponent(el.dataset.ctl));
  });
});
"""
PATIENTS = ["PETIT Paul", "LAURENT Anne", "DURAND Hugo", "SIMON Marc", "MOREAU Claire"]


def _page(body: str) -> str:
    return (f"<!doctype html><html lang='fr'><head><meta charset='utf-8'><title>Dossier"
            f"</title><style>{STYLE}</style></head><body>{body}<script>{SCRIPT}</script>"
            "</body></html>")


DIALOG_PAGE = _page(
    "<section><h1>Dossier de DURAND Hugo</h1>"
    + "".join(f"<div class='field'><label>{f}</label><input></div>"
              for f in ("Nom de naissance", "Prénom", "Médecin traitant"))
    + "<div class='bar' style='justify-content:flex-start'>"
      "<button class='primary' data-ctl='page-enregistrer'>Enregistrer</button>"
      "<button data-ctl='page-annuler'>Annuler</button></div></section>"
      "<div class='backdrop'></div><div class='dialog'><h2>Confirmer la modification</h2>"
      "<p>Les changements du dossier seront enregistrés.</p><div class='bar'>"
      "<button data-ctl='dialog-annuler'>Annuler</button>"
      "<button class='primary' data-ctl='dialog-enregistrer'>Enregistrer</button>"
      "</div></div>")
TABLE_PAGE = _page(
    "<section><h1>Patients hospitalisés</h1><table>"
    + "".join(f"<tr><td>{html.escape(p)}</td><td>Ch. {200 + i * 13}</td><td>"
              f"<button data-ctl='detail-{html.escape(p)}'>Détail</button></td></tr>"
              for i, p in enumerate(PATIENTS))
    + "</table></section>")


class Site:
    """The pages and the clicks they reported, served on 127.0.0.1."""

    def __init__(self) -> None:
        self.clicks: list[str] = []
        self.pages: list[str] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path == "/click":
                    site.clicks.append(parse_qs(url.query).get("ctl", ["?"])[0])
                    body = b""
                else:
                    page = {"/dialog": DIALOG_PAGE, "/table": TABLE_PAGE}.get(url.path)
                    if page is None:
                        self.send_error(404)
                        return
                    body = page.encode()
                    site.pages.append(url.path)
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Browser:
    """Debian's Chromium in a real window on the display, showing one page."""

    def __init__(self, display: str, tmp: Path, url: str) -> None:
        self.profile = tmp / "chromium-profile"
        self.proc = subprocess.Popen(
            [CHROMIUM, "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={self.profile}", "--window-position=0,0",
             "--window-size=1600,1000", "--lang=fr", url],
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp), "DISPLAY": display},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        shutil.rmtree(self.profile, ignore_errors=True)


def _shown(display: str) -> bool:
    """Whether Chromium's window shows the page: its title is the page's <title>."""
    done = subprocess.run(["xdotool", "search", "--name", "Dossier"], capture_output=True,
                          env={"PATH": "/usr/bin:/bin", "DISPLAY": display}, check=False)
    return done.returncode == 0 and bool(done.stdout.strip())


@pytest.fixture
def web(xdisplay: XDisplayFactory, spawn: Spawn, lea_env: dict[str, str],
        tmp_path: Path) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test installs the chromium package")
    display = xdisplay(MONITORS, window_manager=True)
    system = System(spawn, lea_env, tmp_path, extra_env={
        "RPA_WATCHDOG_ORPHAN_TIMEOUT_S": "60", "LEA_BEACON_TIMEOUT_S": "60",
        "LEA_HEARTBEAT_LIVENESS": "10"})
    site = Site()
    spawn(python_argv("-m", "agent", "--machine-id", "ws1", "--executor", "desktop",
                      "--data-dir", str(tmp_path / "agent-data")),
          env={**system.env, "DISPLAY": display}, name="agent-ws1")
    wait_until(lambda: any("dispatcher answered hello" in log.read_text(errors="replace")
                           for log in tmp_path.glob("agent-ws1-*.log")), timeout=60)
    browsers: list[Browser] = []

    def open_page(path: str) -> None:
        browsers.append(Browser(display, tmp_path, site.url + path))
        assert wait_until(lambda: _shown(display), timeout=60), \
            "the Chromium window did not show the page"
        # The window is mapped before its page is painted: the page asked for, then the
        # display's pixels settled.
        assert wait_until(lambda: path in site.pages, timeout=60), "the page was not asked for"
        time.sleep(1.0)
        assert wait_until(lambda: _settled(display), timeout=60), "the display never settled"

    try:
        yield system, site, open_page, display
    finally:
        for browser in browsers:
            browser.close()
        site.close()


def _grab(display: str) -> bytes:
    import mss

    with mss.MSS(display=display) as sct:
        return bytes(sct.grab({"left": 0, "top": 0, "width": 1920, "height": 1080}).bgra)


def _settled(display: str) -> bool:
    """Whether the display shows the same pixels twice, half a second apart (the page
    painted, nothing moving)."""
    before = _grab(display)
    time.sleep(0.5)
    return _grab(display) == before


def _keep_screen(display: str, name: str) -> None:
    """A screenshot of the display for a person to look at when the test fails."""
    import mss
    from PIL import Image

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with mss.MSS(display=display) as sct:
        raw = sct.grab({"left": 0, "top": 0, "width": 1920, "height": 1080})
    Image.frombytes("RGB", raw.size, raw.bgra, "raw", "BGRX").save(ARTIFACTS / f"{name}.png")


def test_the_dialogs_enregistrer_is_clicked_never_the_forms_behind_it(web: Any) -> None:
    system, site, open_page, display = web
    open_page("/dialog")
    _keep_screen(display, "dialog")
    step = {"type": "click", "monitor_index": 0, "target_spec": {"by_text": "Enregistrer"}}
    rid = system.start(workflow(step), "ws1")
    summary = system.wait_status(rid, "completed", PAUSED, timeout=180)
    logged = reports(system, rid)
    assert summary.status == "completed", (summary, [r["body"] for r in logged])
    assert wait_until(lambda: site.clicks == ["dialog-enregistrer"], timeout=10), site.clicks
    body = logged[-1]["body"]
    assert body["resolution_method"] == "ocr", body


def test_the_row_named_says_which_detail_and_no_row_pauses_without_a_click(web: Any) -> None:
    system, site, open_page, display = web
    open_page("/table")
    _keep_screen(display, "table")
    step = {"type": "click", "monitor_index": 0,
            "target_spec": {"by_text": "Détail", "near_text": "DURAND Hugo"}}
    rid = system.start(workflow(step), "ws1")
    summary = system.wait_status(rid, "completed", PAUSED, timeout=180)
    assert summary.status == "completed", (summary, [r["body"] for r in reports(system, rid)])
    assert wait_until(lambda: site.clicks == ["detail-DURAND Hugo"], timeout=10), site.clicks

    step = {"type": "click", "monitor_index": 0, "target_spec": {"by_text": "Détail"}}
    rid = system.start(workflow(step, workflow_id="wf-any"), "ws1")
    summary = system.wait_status(rid, PAUSED, "completed", timeout=180)
    assert summary.status == PAUSED and summary.pause_reason == "ambiguous_target", summary
    (report,) = reports(system, rid)  # no retry: the same screen would answer the same
    assert report["error"] == "ambiguous_target"
    assert site.clicks == ["detail-DURAND Hugo"]
