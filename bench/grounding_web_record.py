"""Record the web grounding set: pages of a hospital web application (bench/web_pages.py)
rendered by Debian's Chromium through Playwright, labelled from the DOM.

    python -m bench.grounding_web_record [--out tests/data/grounding_web] [--part PART]

For each part (``tuning``, ``held-out``, ``held-out-2``; ``--part``: only that one, the
other parts' screens and labels kept as they are), page, layout (``recorded``, ``moved``) and zoom
(100, 125, 150 %), two screens of one 1920x1080 monitor:

- ``alone``: the page alone (headless, a viewport of 1920/zoom x 1080/zoom CSS pixels at a
  device scale of the zoom: 1920x1080 pixels);
- ``window``: the page in a browser window (tabs, address bar) on a real X display (Xvfb
  and openbox), the browser started at the zoom as its device scale; the page's place on
  the monitor is found by matching the browser's own capture of the page on the monitor's.

Every control (``data-ctl``) with its visible text, its box in monitor pixels, the row or
card it belongs to, and whether it is behind a modal dialog; every other visible text
(``texts``), to tell which labels are on the screen more than once. No browser is
downloaded: Playwright drives /usr/bin/chromium (Debian's ``chromium`` package).
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import mss
from PIL import Image

from agent.grounding.anchor import find_anchor
from bench.web_pages import LAYOUTS, PAGES, PARTS, page
from tests.xdisplay import start_xdisplay

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "grounding_web"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-features=Translate",
        "--password-store=basic"]
W, H = 1920, 1080
ZOOMS = (100, 125, 150)
WINDOW_AT = {"recorded": (30, 20), "moved": (150, 70)}
"""Where the browser window's top-left is, in monitor pixels."""
WINDOW_SIZE = (1700, 1000)
"""The browser window's size in monitor pixels (its DIPs are this over the zoom)."""

LABELS_JS = """() => {
  const dialog = document.querySelector('[data-dialog]');
  const behind = e => !!dialog && !dialog.contains(e);
  const seen = r => r.width > 0 && r.height > 0 && r.bottom > 0 && r.right > 0
      && r.top < innerHeight && r.left < innerWidth;
  const controls = [...document.querySelectorAll('[data-ctl]')].map(e => {
    const r = e.getBoundingClientRect();
    return {text: e.innerText.replace(/\\s+/g, ' ').trim(), box: [r.left, r.top, r.width,
            r.height], row: e.dataset.row || null, behind: behind(e), seen: seen(r)};
  }).filter(c => c.seen);
  const texts = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const t = n.textContent.replace(/\\s+/g, ' ').trim();
    const e = n.parentElement;
    if (!t || e.closest('[data-ctl]') || e.closest('style')) continue;
    const r = e.getBoundingClientRect();
    if (seen(r)) texts.push({text: t, behind: behind(e)});
  }
  return {controls, texts, dpr: devicePixelRatio};
}"""


def labels(raw: dict[str, Any], zoom: int, origin: tuple[int, int]) -> dict[str, Any]:
    """The DOM's boxes (CSS pixels of the viewport) in monitor pixels."""
    scale = zoom / 100

    def box(b: list[float]) -> list[int]:
        left, top = origin[0] + b[0] * scale, origin[1] + b[1] * scale
        return [round(left), round(top), round(b[2] * scale), round(b[3] * scale)]

    return {"controls": [{"text": c["text"], "box": box(c["box"]), "row": c["row"],
                          "behind": c["behind"]} for c in raw["controls"]],
            "texts": [t for t in raw["texts"]]}


def page_origin(screen: Image.Image, viewport: Image.Image) -> tuple[int, int]:
    """Where the browser's capture of its page lies on the monitor's capture: its top
    left corner (the menu and the heading), matched at its own scale only."""
    crop = viewport.crop((0, 0, min(700, viewport.width), min(300, viewport.height)))
    match = find_anchor(screen, crop, (1.0,), 0.99)
    if not match.found:
        raise RuntimeError(f"the page was not found on the monitor (best {match.score})")
    return match.left, match.top


def record_alone(pw: Any, configs: list[tuple[str, str, str, int]],
                 out: Path) -> list[dict[str, Any]]:
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
    screens = []
    try:
        for part, kind, layout, zoom in configs:
            scale = zoom / 100
            context = browser.new_context(viewport={"width": round(W / scale),
                                                    "height": round(H / scale)},
                                          device_scale_factor=scale, locale="fr-FR")
            tab = context.new_page()
            tab.set_content(page(kind, part, layout, 0))
            image = Image.open(io.BytesIO(tab.screenshot())).convert("RGB")
            screens.append(_save(out, image, part, kind, "alone", zoom, layout,
                                 labels(tab.evaluate(LABELS_JS), zoom, (0, 0))))
            context.close()
    finally:
        browser.close()
    return screens


def record_window(pw: Any, configs: list[tuple[str, str, str, int]],
                  out: Path) -> list[dict[str, Any]]:
    screens = []
    for zoom in ZOOMS:
        scale = zoom / 100
        display = start_xdisplay([(W, H, 0, 0)], window_manager=True)
        try:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, headless=False, env=display.env(),
                args=[*ARGS, f"--force-device-scale-factor={scale}",
                      f"--window-size={round(WINDOW_SIZE[0] / scale)},"
                      f"{round(WINDOW_SIZE[1] / scale)}", "--window-position=0,0"])
            try:
                context = browser.new_context(no_viewport=True, locale="fr-FR")
                tab = context.new_page()
                for part, kind, layout, z in configs:
                    if z != zoom:
                        continue
                    x, y = WINDOW_AT[layout]
                    session = context.new_cdp_session(tab)
                    window = session.send("Browser.getWindowForTarget")["windowId"]
                    session.send("Browser.setWindowBounds", {"windowId": window, "bounds": {
                        "left": round(x / scale), "top": round(y / scale)}})
                    tab.set_content(page(kind, part, layout, 0))
                    tab.wait_for_timeout(400)
                    viewport = Image.open(io.BytesIO(tab.screenshot())).convert("RGB")
                    with mss.MSS(display=display.display) as sct:
                        raw = sct.grab({"left": 0, "top": 0, "width": W, "height": H})
                    image = Image.frombytes("RGB", raw.size, raw.bgra, "raw", "BGRX")
                    origin = page_origin(image, viewport)
                    screens.append(_save(out, image, part, kind, "window", zoom, layout,
                                         labels(tab.evaluate(LABELS_JS), zoom, origin)))
            finally:
                browser.close()
        finally:
            display.close()
    return screens


def _save(out: Path, image: Image.Image, part: str, kind: str, mode: str, zoom: int,
          layout: str, info: dict[str, Any]) -> dict[str, Any]:
    name = f"{part}-{kind}-{mode}-{zoom}-{layout}.png"
    image.save(out / name, optimize=True)
    print(f"{name}: {len(info['controls'])} controls", flush=True)
    return {"image": name, "program": "web", "part": part, "page": kind, "mode": mode,
            "lang": "fr", "scaling": zoom, "layout": layout, **info}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--part", action="append", choices=PARTS,
                        help="record only this part (again: several); the others kept")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    parts = args.part or list(PARTS)
    configs = list(itertools.product(parts, PAGES, LAYOUTS, ZOOMS))
    with sync_playwright() as pw:
        screens = record_alone(pw, configs, args.out) + record_window(pw, configs, args.out)
    known = args.out / "labels.json"
    if args.part and known.is_file():
        kept = [s for s in json.loads(known.read_text())["screens"] if s["part"] not in parts]
        screens = kept + screens
    (args.out / "labels.json").write_text(json.dumps({"screens": screens}, indent=1,
                                                     ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
