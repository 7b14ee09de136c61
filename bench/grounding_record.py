"""Record the text-grounding set again: real Tk forms on a real X display, labelled by Tk.

    python -m bench.grounding_record [--out tests/data/grounding]

For each language (fr, en), font (Liberation Sans, DejaVu Sans), display scaling (100,
125, 150 %) and layout (``recorded``; ``moved``: rows reordered, buttons reversed), it
starts a 1920x1080 Xvfb monitor with openbox (title bars are text too), an xterm showing a
few lines of notes (text that is not a control), the form (tests/fixtures/labelled_form.py)
at a seeded place, and saves the monitor's pixels (PNG) beside the boxes the form itself
reports for each control (``labels.json``). Debian packages: xvfb, x11-xserver-utils,
openbox, xterm, fonts-liberation, fonts-dejavu-core.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import mss
from PIL import Image

from tests.xdisplay import start_xdisplay

ROOT = Path(__file__).resolve().parent.parent
FORM = ROOT / "tests" / "fixtures" / "labelled_form.py"
OUT = ROOT / "tests" / "data" / "grounding"
W, H = 1920, 1080
LANGS = ("fr", "en")
FONTS = ("Liberation Sans", "DejaVu Sans")
SCALINGS = (100, 125, 150)
LAYOUTS = ("recorded", "moved")
NOTES = {
    "fr": "Patiente vue à 14 h, fièvre modérée.\nAnnuler le rendez-vous du 12/03 si "
          "besoin.\nBilan sanguin reçu, cœur normal.\n",
    "en": "Patient seen at 2 pm, mild fever.\nCancel the 12/03 visit if needed.\n"
          "Blood test received, heart normal.\n",
}


def record_screen(lang: str, font: str, scaling: int, layout: str, seed: int,
                  tmp: Path) -> tuple[Image.Image, dict[str, Any]]:
    rng = random.Random(seed)
    display = start_xdisplay([(W, H, 0, 0)], window_manager=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        notes = tmp / f"notes-{lang}.txt"
        notes.write_text(NOTES[lang], encoding="utf-8")
        term_x = rng.choice((40, 1100))
        procs.append(subprocess.Popen(
            ["xterm", "-geometry", f"60x8+{term_x}+{rng.randint(600, 800)}", "-fa",
             "DejaVu Sans Mono", "-fs", str(9 * scaling // 100), "-e",
             f"cat {notes}; sleep 3600"], env=display.env(LANG="C.UTF-8"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        form_x = rng.randint(60, 200) if term_x > 500 else rng.randint(700, 900)
        form = subprocess.Popen(
            [sys.executable, str(FORM), lang, font, str(scaling), layout, str(form_x),
             str(rng.randint(20, 60)), str(tmp / "presses.jsonl")],
            env=display.env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(form)  # type: ignore[arg-type]
        assert form.stdout is not None
        layout_info = json.loads(form.stdout.readline())
        time.sleep(0.8)  # the xterm and the form drawn
        with mss.MSS(display=display.display) as sct:
            raw = sct.grab({"left": 0, "top": 0, "width": W, "height": H})
        image = Image.frombytes("RGB", raw.size, raw.bgra, "raw", "BGRX")
        return image, layout_info
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(5)
        display.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    screens = []
    configs = itertools.product(LANGS, FONTS, SCALINGS, LAYOUTS)
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (lang, font, scaling, layout) in enumerate(configs):
            # The moved layout of a configuration sits where its recorded one did.
            image, info = record_screen(lang, font, scaling, layout, seed // 2, Path(tmp))
            name = f"{lang}-{font.split()[0].lower()}-{scaling}-{layout}.png"
            image.save(args.out / name, optimize=True)
            screens.append({"image": name, "lang": lang, "font": font, "scaling": scaling,
                            "layout": layout, "controls": info["controls"]})
            print(f"{name}: {len(info['controls'])} controls", flush=True)
    (args.out / "labels.json").write_text(json.dumps({"screens": screens}, indent=1,
                                                     ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
