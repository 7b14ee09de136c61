"""A third Tk application for the loop-detector recordings: a patient sheet with a toolbar,
a menu, a note, a "Valider" button whose outcome shows in a status line far below it, a
list that grows and a dialog; it writes its own state to a file.

Its twin in a browser is web_app.py (same controls, same names, same behaviour), so each
kind of step is recorded in two applications. The state (rows, note, status line, view,
whether the menu or the dialog is open) labels a recorded step; ``widgets`` says where its
controls are on screen (centres in screen pixels), the menu's items while it is posted.
Toolbar buttons highlight under the pointer and, but "Ajouter une ligne", do nothing;
"Valider" with an empty note shows the same error each time. Noise on request:
``--noise clock,spinner``.

    python bench/loop_real/fiche_app.py STATE_FILE [--noise clock,spinner] [--x X --y Y]
"""

from __future__ import annotations

import sys
import time
import tkinter as tk
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.loop_real.form_app import SheetDialog, main, write_state  # noqa: E402
from bench.loop_real.journal_app import toolbar  # noqa: E402

MENU_ITEMS = ("Vue suivante", "Exporter")


class Fiche:
    def __init__(self, root: tk.Tk, state_file: Path, noise: set[str]) -> None:
        self.root, self.state_file, self.noise = root, state_file, noise
        self.sheet = SheetDialog(root)
        root.title("Fiche de soins")
        font = ("DejaVu Sans", 12)
        bar = tk.Frame(root)
        bar.grid(row=0, column=0, sticky="w", padx=8, pady=6)
        self.buttons: dict[str, tk.Widget] = {**toolbar(bar, font, self.add_row)}
        self.menu_button = tk.Menubutton(bar, text="Actions ▾", font=font, relief="raised")
        self.menu = tk.Menu(self.menu_button, tearoff=0, font=font)
        self.menu.add_command(label=MENU_ITEMS[0], command=self.next_view)
        self.menu.add_command(label=MENU_ITEMS[1], command=lambda: None)
        self.menu_button.configure(menu=self.menu)
        self.menu_button.pack(side="left", padx=3)
        self.buttons["Actions"] = self.menu_button
        self.view = 1
        self.view_label = tk.Label(root, text="Vue 1 — constantes", font=font)
        self.view_label.grid(row=1, column=0, sticky="w", padx=8)
        tk.Label(root, text="Note", font=font).grid(row=2, column=0, sticky="w", padx=8)
        self.note = tk.Entry(root, width=40, font=font)
        self.note.grid(row=3, column=0, sticky="w", padx=8, pady=4)
        line = tk.Frame(root)
        line.grid(row=4, column=0, sticky="w", padx=8)
        self.buttons["Valider"] = tk.Button(line, text="Valider", font=font,
                                            command=self.validate)
        self.buttons["Ouvrir"] = tk.Button(line, text="Ouvrir la fiche", font=font,
                                           command=self.sheet.open)
        for name in ("Valider", "Ouvrir"):
            self.buttons[name].pack(side="left", padx=3)
        self.canvas = tk.Canvas(root, width=200, height=40, highlightthickness=0)
        self.canvas.grid(row=5, column=0, sticky="w", padx=8)
        self.rows = tk.Listbox(root, height=10, width=52, font=font)
        self.rows.grid(row=6, column=0, sticky="w", padx=8, pady=(40, 8))
        self.status = tk.Label(root, text="Prêt", font=font, anchor="w", width=52)
        self.status.grid(row=7, column=0, sticky="w", padx=8, pady=(30, 8))
        self.saved = 0
        self.angle = 0
        self.tick()
        self.spin()
        # Wherever the keyboard focus is (the dialog, or the sheet if the window manager
        # left it there), Escape closes the dialog.
        root.bind_all("<Escape>", lambda _e: self.sheet.close())
        self.dump()

    def add_row(self) -> None:
        n = self.rows.size() + 1
        self.rows.insert("end", f"{time.strftime('%H:%M')}  Soin {n:02d} — pansement refait")

    def next_view(self) -> None:
        self.view += 1
        self.view_label.configure(text=f"Vue {self.view} — constantes")

    def validate(self) -> None:
        if not self.note.get().strip():
            self.status.configure(text="Erreur : la note est obligatoire")
            return
        self.saved += 1
        self.status.configure(text=f"Enregistré ({self.saved}) : {self.note.get()[:30]}")

    def tick(self) -> None:
        self.canvas.delete("clock")
        if "clock" in self.noise:
            self.canvas.create_text(120, 20, text=time.strftime("%H:%M:%S"), tags="clock",
                                    font=("DejaVu Sans Mono", 14))
        self.root.after(1000 - int(time.time() * 1000) % 1000 + 5, self.tick)

    def spin(self) -> None:
        if "spinner" in self.noise:
            self.canvas.delete("spin")
            self.angle = (self.angle + 30) % 360
            self.canvas.create_arc(5, 5, 35, 35, start=self.angle, extent=270, style="arc",
                                   width=4, tags="spin")
        self.root.after(120, self.spin)

    def widgets(self) -> dict[str, list[int]]:
        named: dict[str, tk.Widget] = {**self.buttons, "note": self.note, "rows": self.rows}
        out = {name: [w.winfo_rootx() + w.winfo_width() // 2,
                      w.winfo_rooty() + w.winfo_height() // 2]
               for name, w in named.items()}
        if self.menu.winfo_ismapped():
            for i, label in enumerate(MENU_ITEMS):
                top = self.menu.yposition(i)
                bottom = self.menu.yposition(i + 1) if i + 1 < len(MENU_ITEMS) else \
                    self.menu.winfo_height()
                out[label] = [self.menu.winfo_rootx() + self.menu.winfo_width() // 2,
                              self.menu.winfo_rooty() + (top + bottom) // 2]
        return out

    def state(self) -> dict[str, Any]:
        return {"rows": list(self.rows.get(0, "end")), "note": self.note.get(),
                "status": self.status.cget("text"), "view": self.view,
                "menu": bool(self.menu.winfo_ismapped()), **self.sheet.state(),
                "widgets": self.widgets()}

    def dump(self) -> None:
        write_state(self.root, self.state_file, self.state, self.dump)


if __name__ == "__main__":
    main(Fiche)
