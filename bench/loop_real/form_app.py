"""A Tk form that the loop-detector recordings act on; it writes its own state to a file.

The state (the texts of its fields, the list's selection and scroll position, a counter, a
check box, whether its dialog is open and what is typed there) is what labels a recorded
step progress or stuck: a step that leaves it unchanged made no progress, whatever the
screen did. Noise it can show on request: a digital clock with seconds, an analog clock,
a spinner (``--noise clock,analog,spinner``). Its buttons highlight under the pointer
(Tk's active background) and its focused entry's caret blinks.

    python bench/loop_real/form_app.py STATE_FILE [--noise clock,analog,spinner] [--x X --y Y]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import tkinter as tk
from collections.abc import Callable
from pathlib import Path
from typing import Any

ITEMS = [f"Patient {i:02d} — dossier {1000 + 7 * i}" for i in range(40)]


class Form:
    def __init__(self, root: tk.Tk, state_file: Path, noise: set[str]) -> None:
        self.root, self.state_file = root, state_file
        self.sheet = SheetDialog(root)
        root.title("Dossier patient")
        font = ("DejaVu Sans", 12)
        tk.Label(root, text="Nom", font=font).grid(row=0, column=0, sticky="w", padx=8, pady=6)
        self.name = tk.Entry(root, width=30, font=font)
        self.name.grid(row=0, column=1, sticky="w", padx=8)
        tk.Label(root, text="Commentaire (verrouillé)", font=font).grid(row=1, column=0,
                                                                       sticky="w", padx=8)
        self.locked = tk.Entry(root, width=30, font=font)
        self.locked.insert(0, "lecture seule")
        self.locked.configure(state="disabled")
        self.locked.grid(row=1, column=1, sticky="w", padx=8, pady=6)
        self.listbox = tk.Listbox(root, height=6, width=34, font=font, exportselection=False)
        for item in ITEMS:
            self.listbox.insert("end", item)
        self.listbox.grid(row=2, column=0, columnspan=2, sticky="w", padx=8, pady=6)
        self.count = 0
        self.count_label = tk.Label(root, text="Doses : 0", font=font, width=10)
        tk.Button(root, text="+", font=font, width=3, command=self.plus).grid(
            row=3, column=0, sticky="w", padx=8)
        self.count_label.grid(row=3, column=0, sticky="e")
        self.check = tk.IntVar(value=0)
        tk.Checkbutton(root, text="Allergie connue", variable=self.check, font=font).grid(
            row=3, column=1, sticky="w", padx=8)
        tk.Button(root, text="Valider", font=font, width=10, command=lambda: None).grid(
            row=4, column=0, sticky="w", padx=8, pady=8)
        tk.Button(root, text="Ouvrir la fiche", font=font, command=self.sheet.open).grid(
            row=4, column=1, sticky="w", padx=8)
        self.canvas = tk.Canvas(root, width=260, height=90, highlightthickness=0)
        self.canvas.grid(row=5, column=0, columnspan=2, sticky="w", padx=8, pady=6)
        self.noise = noise
        self.angle = 0
        self.tick()
        self.spin()
        self.dump()

    def plus(self) -> None:
        self.count += 1
        self.count_label.configure(text=f"Doses : {self.count}")

    def tick(self) -> None:
        c = self.canvas
        c.delete("clock")
        now = time.localtime()
        if "clock" in self.noise:
            c.create_text(60, 20, text=time.strftime("%H:%M:%S", now), tags="clock",
                          font=("DejaVu Sans Mono", 14))
        if "analog" in self.noise:
            cx, cy, r = 200, 45, 40
            c.create_oval(cx - r, cy - r, cx + r, cy + r, tags="clock")
            for value, length, width in ((now.tm_sec / 60, r - 4, 1),
                                         ((now.tm_min + now.tm_sec / 60) / 60, r - 10, 3)):
                a = 2 * math.pi * value
                c.create_line(cx, cy, cx + length * math.sin(a), cy - length * math.cos(a),
                              width=width, tags="clock")
        self.root.after(1000 - int(time.time() * 1000) % 1000 + 5, self.tick)

    def spin(self) -> None:
        if "spinner" in self.noise:
            c = self.canvas
            c.delete("spin")
            self.angle = (self.angle + 30) % 360
            c.create_arc(110, 55, 140, 85, start=self.angle, extent=270, style="arc",
                         width=4, tags="spin")
        self.root.after(120, self.spin)

    def state(self) -> dict[str, Any]:
        return {
            "name": self.name.get(), "locked": self.locked.get(),
            "selection": list(self.listbox.curselection()),
            "list_top": round(self.listbox.yview()[0], 4), "count": self.count,
            "check": self.check.get(), **self.sheet.state(),
            "focus": str(self.root.focus_get()),
        }

    def dump(self) -> None:
        write_state(self.root, self.state_file, self.state, self.dump)


class SheetDialog:
    """The "Fiche" dialog: an observation to type, a button that closes it."""

    def __init__(self, root: tk.Tk) -> None:
        self.root = root
        self.window: tk.Toplevel | None = None
        self.entry: tk.Entry | None = None

    def open(self) -> None:
        if self.window is not None:
            return
        self.window = tk.Toplevel(self.root)
        self.window.title("Fiche")
        self.window.geometry("+760+260")
        tk.Label(self.window, text="Observation", font=("DejaVu Sans", 12)).pack(padx=10,
                                                                                 pady=6)
        self.entry = tk.Entry(self.window, width=28, font=("DejaVu Sans", 12))
        self.entry.pack(padx=10)
        self.entry.focus_set()
        tk.Button(self.window, text="Fermer", command=self.close).pack(pady=8)

    def close(self) -> None:
        if self.window is not None:
            self.window.destroy()
        self.window = self.entry = None

    def state(self) -> dict[str, Any]:
        return {"dialog": self.window is not None,
                "dialog_text": self.entry.get() if self.entry is not None else None}


def app_arguments() -> argparse.Namespace:
    """An application's command line: ``STATE_FILE [--noise ...] [--x X --y Y] [--scale S]``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("state_file", type=Path)
    parser.add_argument("--noise", default="")
    parser.add_argument("--x", type=int, default=120)
    parser.add_argument("--y", type=int, default=120)
    parser.add_argument("--scale", type=float, default=1.0, help="the fonts' size factor")
    return parser.parse_args()


def write_state(root: tk.Tk, state_file: Path, state: Callable[[], dict[str, Any]],
                again: Callable[[], None]) -> None:
    """Write the application's state atomically, and again in 50 ms."""
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state()))
    os.replace(tmp, state_file)
    root.after(50, again)


def main(app: Callable[[tk.Tk, Path, set[str]], object] = Form) -> None:
    """Run ``app`` from the command line (``STATE_FILE [--noise ...] [--x X --y Y]
    [--scale S]``)."""
    args = app_arguments()
    root = tk.Tk()
    root.geometry(f"+{args.x}+{args.y}")
    # Fonts are sized in points: Tk's scaling (pixels per point) makes the whole form larger.
    root.tk.call("tk", "scaling", float(root.tk.call("tk", "scaling")) * args.scale)
    app(root, args.state_file, {n for n in args.noise.split(",") if n})
    root.mainloop()


if __name__ == "__main__":
    main()
