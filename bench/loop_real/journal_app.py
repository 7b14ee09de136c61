"""A second Tk application for the loop-detector recordings: a care journal whose rows are
added by a toolbar button, far from it in the window; it writes its own state to a file.

The state (the rows, the note typed, the focus) labels a recorded step; it also carries
where its controls are on screen (``widgets``: centres in screen pixels), so a scenario
names a control rather than a point measured by hand. Its toolbar buttons highlight under
the pointer (Tk's active background) and do nothing but "Ajouter une ligne"; the note's
caret blinks. Noise as in form_app.py (``--noise clock,analog,spinner``).

    python bench/loop_real/journal_app.py STATE_FILE [--noise clock,spinner] [--x X --y Y]
"""

from __future__ import annotations

import sys
import time
import tkinter as tk
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.loop_real.form_app import main, write_state  # noqa: E402

TOOLBAR = ("Ajouter une ligne", "Actualiser", "Imprimer", "Aide")


def toolbar(bar: tk.Frame, font: tuple[str, int], add_row: Callable[[], None]
            ) -> dict[str, tk.Button]:
    """The toolbar's buttons, packed in ``bar``: the first adds a row, the others do
    nothing (each highlights under the pointer: Tk's active background)."""
    buttons = {}
    for text in TOOLBAR:
        button = tk.Button(bar, text=text, font=font,
                           command=add_row if text == TOOLBAR[0] else (lambda: None))
        button.pack(side="left", padx=3)
        buttons[text] = button
    return buttons


class Journal:
    def __init__(self, root: tk.Tk, state_file: Path, noise: set[str]) -> None:
        self.root, self.state_file, self.noise = root, state_file, noise
        root.title("Journal de soins")
        font = ("DejaVu Sans", 12)
        bar = tk.Frame(root)
        bar.grid(row=0, column=0, sticky="w", padx=8, pady=6)
        self.buttons = toolbar(bar, font, self.add_row)
        tk.Label(root, text="Note", font=font).grid(row=1, column=0, sticky="w", padx=8)
        self.note = tk.Entry(root, width=40, font=font)
        self.note.grid(row=2, column=0, sticky="w", padx=8, pady=4)
        self.clock = tk.Label(root, text="", font=("DejaVu Sans Mono", 14))
        self.clock.grid(row=3, column=0, sticky="e", padx=8)
        self.rows = tk.Listbox(root, height=14, width=52, font=font)
        self.rows.grid(row=4, column=0, sticky="w", padx=8, pady=(90, 8))
        self.spinner = tk.Canvas(root, width=40, height=40, highlightthickness=0)
        self.spinner.grid(row=3, column=0, sticky="w", padx=8)
        self.angle = 0
        self.tick()
        self.spin()
        self.dump()

    def add_row(self) -> None:
        n = self.rows.size() + 1
        self.rows.insert("end", f"{time.strftime('%H:%M')}  Soin {n:02d} — pansement refait")

    def tick(self) -> None:
        if "clock" in self.noise:
            self.clock.configure(text=time.strftime("%H:%M:%S"))
        self.root.after(1000 - int(time.time() * 1000) % 1000 + 5, self.tick)

    def spin(self) -> None:
        if "spinner" in self.noise:
            self.spinner.delete("spin")
            self.angle = (self.angle + 30) % 360
            self.spinner.create_arc(5, 5, 35, 35, start=self.angle, extent=270, style="arc",
                                    width=4, tags="spin")
        self.root.after(120, self.spin)

    def widgets(self) -> dict[str, list[int]]:
        named: dict[str, tk.Widget] = {**self.buttons, "note": self.note, "rows": self.rows}
        return {name: [w.winfo_rootx() + w.winfo_width() // 2,
                       w.winfo_rooty() + w.winfo_height() // 2]
                for name, w in named.items()}

    def state(self) -> dict[str, Any]:
        return {"rows": list(self.rows.get(0, "end")), "note": self.note.get(),
                "focus": str(self.root.focus_get()), "widgets": self.widgets()}

    def dump(self) -> None:
        write_state(self.root, self.state_file, self.state, self.dump)


if __name__ == "__main__":
    main(Journal)
