"""Record the text-grounding set again: real Tk forms on a real X display, labelled by Tk.

    python -m bench.grounding_record [--out tests/data/grounding]

For each language (fr, en), font (Liberation Sans, DejaVu Sans), display scaling (100,
125, 150 %) and layout (``recorded``; ``moved``: rows reordered, buttons reversed), it
starts a 1920x1080 Xvfb monitor with openbox (title bars are text too), an xterm showing a
few lines of notes (text that is not a control), the form (tests/fixtures/labelled_form.py)
at a seeded place, and saves the monitor's pixels (PNG) beside the boxes the form itself
reports for each control (``labels.json``).

Then the same for mousepad (a real GTK 3 program): its window at a seeded place
(``moved``: elsewhere), its "Go to" dialog open (Ctrl+L), in French (a ``fr_FR.UTF-8``
locale compiled into a temporary folder, LOCPATH: the machine's locales are not touched)
or English, its font set through GTK's settings.ini, the scaling through
``GDK_DPI_SCALE``; the boxes are the ones mousepad reports through its accessibility tree
(AT-SPI, bench/atspi_boxes.py): menus, push buttons, labels.

Debian packages: xvfb, x11-xserver-utils, openbox, xterm, fonts-liberation,
fonts-dejavu-core; for mousepad: mousepad, xdotool, dbus, at-spi2-core, python3-gi,
gir1.2-atspi-2.0, locales.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
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
PROGRAMS = ("form", "mousepad")
ATSPI_BOXES = ROOT / "bench" / "atspi_boxes.py"
MOUSEPAD_ROLES = ("menu", "push button", "label")
MOUSEPAD_LANG = {"fr": "fr_FR.UTF-8", "en": "C.UTF-8"}
TERM_TOP = 880
"""mousepad's screens: the xterm below every window (a box hidden under another window
would still be reported by AT-SPI)."""
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


def record_mousepad(lang: str, font: str, scaling: int, layout: str, seed: int,
                    tmp: Path) -> tuple[Image.Image, dict[str, Any]]:
    rng = random.Random(seed)
    places = [(rng.randint(40, 400), rng.randint(30, 150)),
              (rng.randint(700, 1000), rng.randint(150, 250))]
    x, y = places[LAYOUTS.index(layout)]
    config = tmp / f"gtk-{font.split()[0]}"
    (config / "gtk-3.0").mkdir(parents=True, exist_ok=True)
    (config / "gtk-3.0" / "settings.ini").write_text(
        f"[Settings]\ngtk-font-name={font} 10\n", encoding="utf-8")
    display = start_xdisplay([(W, H, 0, 0)], window_manager=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        notes = tmp / f"notes-{lang}.txt"
        notes.write_text(NOTES[lang], encoding="utf-8")
        procs.append(subprocess.Popen(
            ["xterm", "-geometry", f"60x8+{rng.randint(40, 1100)}+{TERM_TOP}", "-fa",
             "DejaVu Sans Mono", "-fs", str(9 * scaling // 100), "-e",
             f"cat {notes}; sleep 3600"], env=display.env(LANG="C.UTF-8"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        env = display.env(LANG=MOUSEPAD_LANG[lang], LOCPATH=str(tmp / "locale"),
                          XDG_CONFIG_HOME=str(config), GDK_DPI_SCALE=str(scaling / 100))
        env.pop("NO_AT_BRIDGE", None)
        script = (f"mousepad & xdotool search --sync --onlyvisible --class mousepad "
                  f"windowmove --sync {x} {y} windowactivate --sync; sleep 1; "
                  f"xdotool key ctrl+l; sleep 1.5; /usr/bin/python3 {ATSPI_BOXES} "
                  + " ".join(f"'{r}'" for r in MOUSEPAD_ROLES) + "; sleep 3600")
        session = subprocess.Popen(["dbus-run-session", "--", "sh", "-c", script], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            assert session.stdout is not None
            # The accessibility registry says it started on the same output: skip it.
            for line in session.stdout:
                if line.startswith(b"["):
                    break
            else:
                raise RuntimeError("mousepad's accessibility tree was not read")
            controls = json.loads(line)
            with mss.MSS(display=display.display) as sct:
                raw = sct.grab({"left": 0, "top": 0, "width": W, "height": H})
        finally:
            os.killpg(session.pid, signal.SIGTERM)
            session.wait(5)
        hidden = [c for c in controls if c["box"][1] + c["box"][3] > TERM_TOP]
        if hidden or not controls:
            raise RuntimeError(f"mousepad controls under the xterm or none: {controls}")
        image = Image.frombytes("RGB", raw.size, raw.bgra, "raw", "BGRX")
        return image, {"controls": [{"text": c["text"], "box": c["box"]} for c in controls]}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(5)
        display.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", choices=PROGRAMS, help="record this program's screens "
                        "and keep the others' already in labels.json")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    screens = []
    if args.only and (args.out / "labels.json").is_file():
        screens = [{"program": "form", **s}
                   for s in json.loads((args.out / "labels.json").read_text())["screens"]
                   if s.get("program", "form") != args.only]
    # The seed is the configuration's rank in the whole set, whatever is recorded now.
    configs = [(seed, c) for seed, c in
               enumerate(itertools.product(PROGRAMS, LANGS, FONTS, SCALINGS, LAYOUTS))
               if args.only in (None, c[0])]
    with tempfile.TemporaryDirectory() as tmp:
        # mousepad's French: the locale compiled here, not installed on the machine.
        (Path(tmp) / "locale").mkdir()
        subprocess.run(["localedef", "-i", "fr_FR", "-f", "UTF-8",
                        str(Path(tmp) / "locale" / "fr_FR.UTF-8")], check=True)
        for seed, (program, lang, font, scaling, layout) in configs:
            # The moved layout of a configuration sits where its recorded one did.
            record = record_screen if program == "form" else record_mousepad
            image, info = record(lang, font, scaling, layout, seed // 2, Path(tmp))
            prefix = "" if program == "form" else f"{program}-"
            name = f"{prefix}{lang}-{font.split()[0].lower()}-{scaling}-{layout}.png"
            image.save(args.out / name, optimize=True)
            screens.append({"image": name, "program": program, "lang": lang, "font": font,
                            "scaling": scaling, "layout": layout,
                            "controls": info["controls"]})
            print(f"{name}: {len(info['controls'])} controls", flush=True)
    (args.out / "labels.json").write_text(json.dumps({"screens": screens}, indent=1,
                                                     ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
