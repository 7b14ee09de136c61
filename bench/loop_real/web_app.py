"""The patient sheet of fiche_app.py as a web page in a real Chromium window, for the
loop-detector recordings: the same controls, names and behaviour, drawn by a browser (CSS
hover, a blinking caret of its own, a dropdown menu, a modal ``<dialog>``).

Playwright starts Debian's Chromium (/usr/bin/chromium, nothing downloaded) on the display
in ``DISPLAY`` and reads the page's state every 50 ms into STATE_FILE, as the Tk apps
write theirs: the rows, the note, the status line, the view, whether the menu or dialog is
open, and where the controls are on screen (``widgets``). The page learns where its
viewport is on screen from the pointer (a mouse event's ``screenX - clientX``): the
recorder moves the pointer over the window before it names a control.

    python bench/loop_real/web_app.py STATE_FILE [--noise clock,spinner] [--x X --y Y]
        [--scale S]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.loop_real.form_app import app_arguments  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-features=Translate",
        "--password-store=basic"]
SIZE = (1000, 880)

PAGE = """<!doctype html><html lang="fr"><head><meta charset="utf-8"><title>Fiche de soins
</title><style>
body { font: 16px 'DejaVu Sans', sans-serif; margin: 10px; background: #f4f4f4; }
button { font: inherit; padding: 5px 10px; background: #e0e0e0; border: 1px solid #999; }
button:hover { background: #c8d8f0; }
#menu { position: absolute; display: none; background: #fff; border: 1px solid #888;
        box-shadow: 2px 2px 6px #888; }
#menu.open { display: block; }
#menu div { padding: 8px 24px; }
#menu div:hover { background: #c8d8f0; }
#note { width: 400px; font: inherit; padding: 4px; }
#rows { height: 260px; width: 560px; margin-top: 50px; background: #fff; overflow: auto;
        border: 1px solid #999; list-style: none; padding: 4px; }
#status { margin-top: 30px; width: 560px; }
#noise { height: 40px; position: relative; }
#spin { display: none; width: 26px; height: 26px; border: 4px solid #888;
        border-top-color: transparent; border-radius: 50%; animation: r 1s linear infinite; }
@keyframes r { to { transform: rotate(360deg); } }
#clock { position: absolute; left: 90px; top: 8px; font: 18px 'DejaVu Sans Mono'; }
</style></head><body>
<div id="bar"><button data-w="Ajouter une ligne" id="add">Ajouter une ligne</button>
<button data-w="Actualiser">Actualiser</button> <button data-w="Imprimer">Imprimer</button>
<button data-w="Aide">Aide</button> <button data-w="Actions" id="actions">Actions ▾</button>
</div>
<div id="menu"><div data-w="Vue suivante" id="next">Vue suivante</div>
<div data-w="Exporter">Exporter</div></div>
<p id="view">Vue 1 — constantes</p>
<label>Note<br><input id="note" data-w="note" autocomplete="off"></label>
<p><button data-w="Valider" id="validate">Valider</button>
<button data-w="Ouvrir" id="open">Ouvrir la fiche</button></p>
<div id="noise"><div id="spin"></div><span id="clock"></span></div>
<ul id="rows" data-w="rows"></ul>
<div id="status">Prêt</div>
<dialog id="dialog"><p>Observation</p><input id="dialog_text" autocomplete="off">
<p><button id="close">Fermer</button></p></dialog>
<script>
const $ = id => document.getElementById(id);
let view = 1, saved = 0, offset = null;
addEventListener('mousemove', e => { offset = [e.screenX - e.clientX, e.screenY - e.clientY]; });
$('add').onclick = () => {
  const li = document.createElement('li'), n = $('rows').children.length + 1;
  li.textContent = new Date().toTimeString().slice(0, 5) + '  Soin '
    + String(n).padStart(2, '0') + ' — pansement refait';
  $('rows').appendChild(li); };
$('actions').onclick = () => { const r = $('actions').getBoundingClientRect();
  $('menu').style.left = r.left + 'px'; $('menu').style.top = r.bottom + 'px';
  $('menu').classList.toggle('open'); };
$('next').onclick = () => { view += 1; $('view').textContent = 'Vue ' + view + ' — constantes';
  $('menu').classList.remove('open'); };
document.querySelector('[data-w=Exporter]').onclick = () => $('menu').classList.remove('open');
addEventListener('keydown', e => { if (e.key === 'Escape') $('menu').classList.remove('open'); });
$('validate').onclick = () => { const note = $('note').value;
  $('status').textContent = note.trim()
    ? 'Enregistré (' + (++saved) + ') : ' + note.slice(0, 30)
    : 'Erreur : la note est obligatoire'; };
$('open').onclick = () => {
  if (!$('dialog').open) { $('dialog_text').value = ''; $('dialog').showModal(); } };
$('close').onclick = () => $('dialog').close();
const noise = new Set(location.hash.slice(1).split(','));
if (noise.has('spinner')) $('spin').style.display = 'block';
const tick = () => {
  if (noise.has('clock')) $('clock').textContent = new Date().toTimeString().slice(0, 8);
  setTimeout(tick, 1000 - Date.now() % 1000 + 5); };
tick();
window.state = () => {
  const widgets = {};
  if (offset) for (const e of document.querySelectorAll('[data-w]')) {
    const r = e.getBoundingClientRect();
    // CSS pixels to the screen's (--force-device-scale-factor).
    const k = devicePixelRatio;
    if (r.width > 0) widgets[e.dataset.w] = [Math.round((r.left + r.width / 2 + offset[0]) * k),
                                             Math.round((r.top + r.height / 2 + offset[1]) * k)];
  }
  return {rows: [...$('rows').children].map(li => li.textContent), note: $('note').value,
          status: $('status').textContent, view, menu: $('menu').classList.contains('open'),
          dialog: $('dialog').open, dialog_text: $('dialog').open ? $('dialog_text').value : null,
          widgets};
};
</script></body></html>"""


def write_state(state_file: Path, state: dict[str, Any]) -> None:
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, state_file)


def main() -> None:
    from playwright.sync_api import sync_playwright

    args = app_arguments()
    page_file = args.state_file.with_suffix(".html")
    page_file.write_text(PAGE)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=False,
                                     args=[*ARGS, f"--force-device-scale-factor={args.scale}",
                                           f"--window-size={SIZE[0]},{SIZE[1]}",
                                           f"--window-position={args.x},{args.y}"])
        context = browser.new_context(no_viewport=True, locale="fr-FR")
        tab = context.new_page()
        session = context.new_cdp_session(tab)
        window = session.send("Browser.getWindowForTarget")["windowId"]
        session.send("Browser.setWindowBounds", {"windowId": window, "bounds": {
            "left": args.x, "top": args.y, "width": SIZE[0], "height": SIZE[1]}})
        tab.goto(f"{page_file.as_uri()}#{args.noise}")
        stop: list[int] = []
        # The recorder ends the app with SIGTERM: close the browser, no window left behind.
        signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
        while not stop:
            write_state(args.state_file, tab.evaluate("state()"))
            time.sleep(0.05)
        browser.close()


if __name__ == "__main__":
    main()
