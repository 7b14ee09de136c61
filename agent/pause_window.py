"""The pause window: ``python -m agent.pause_window`` reads an AgentPaused as JSON on stdin.

It runs as its own process (started by :mod:`agent.pause_notice`), so Tk never shares a
thread with the agent's loop and a window that fails cannot take the agent down; closing it
is ending the process. The text is never truncated (docs/screens-and-pauses.md): a read-only text
box sized to the content up to a cap, with a scrollbar from the cap on, wrapping long lines.
"""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any

from messages.pause import AgentPaused

TITLE = "Léa — replay en pause"
MIN_COLS, MAX_COLS = 40, 100
MAX_ROWS = 24
SCROLL_FROM_CHARS = 200


def notice_text(msg: AgentPaused) -> str:
    """Everything the person must read, in full."""
    details = []
    if msg.reason:
        details.append(f"Raison : {msg.reason}")
    if msg.action_id:
        details.append(f"Étape : {msg.action_id}")
    if msg.safety_checks:
        details.append("Vérifications avant de reprendre :")
        details += [f"  ☐ {c.label}" + (" (obligatoire)" if c.required else "")
                    for c in msg.safety_checks]
    details.append(f"Replay : {msg.replay_id}")
    return (msg.message.strip() or "(aucun message)") + "\n\n" + "\n".join(details)


def text_box_size(text: str, min_cols: int = MIN_COLS, max_cols: int = MAX_COLS,
                  max_rows: int = MAX_ROWS) -> tuple[int, int, bool]:
    """``(columns, rows, scrollbar)`` for ``text`` word-wrapped at the columns: as wide as
    the longest line within [min_cols, max_cols], as tall as the wrapped text up to
    ``max_rows``. The scrollbar shows once that cap is reached or from 200 characters on,
    so a long multi-line reason is never cut silently."""
    lines = text.split("\n")
    cols = max(min_cols, min(max_cols, max((len(line) for line in lines), default=0)))
    wrapped = sum(max(1, len(textwrap.wrap(line, cols, break_long_words=True)))
                  for line in lines)
    return cols, min(wrapped, max_rows), wrapped >= max_rows or len(text) >= SCROLL_FROM_CHARS


def build(root: Any, msg: AgentPaused) -> Any:
    """Fill ``root`` (a Tk) with the notice; the Text widget holding it."""
    import tkinter as tk

    text = notice_text(msg)
    cols, rows, scroll = text_box_size(text)
    root.title(TITLE)
    root.attributes("-topmost", True)
    frame = tk.Frame(root, padx=12, pady=10)
    frame.pack(fill="both", expand=True)
    tk.Label(frame, text="Léa a mis le replay en pause. Une personne doit intervenir.",
             font=("TkDefaultFont", 11, "bold"), anchor="w").pack(fill="x", pady=(0, 8))
    box = tk.Frame(frame)
    box.pack(fill="both", expand=True)
    widget = tk.Text(box, width=cols, height=rows, wrap="word", relief="flat",
                     background=root.cget("background"))
    widget.insert("1.0", text)
    widget.configure(state="disabled")  # readable and selectable, not editable
    if scroll:
        bar = tk.Scrollbar(box, command=widget.yview)
        widget.configure(yscrollcommand=bar.set)
        bar.pack(side="right", fill="y")
    widget.pack(side="left", fill="both", expand=True)
    tk.Button(frame, text="J'ai lu", command=root.destroy).pack(anchor="e", pady=(8, 0))
    return widget


def main() -> int:
    try:
        msg = AgentPaused.model_validate(json.loads(sys.stdin.read()))
    except ValueError as exc:
        print(f"pause_window: bad input: {exc}", file=sys.stderr)
        return 2
    import tkinter as tk

    try:
        root = tk.Tk()
    except tk.TclError as exc:  # no display after all
        print(f"pause_window: no window: {exc}", file=sys.stderr)
        return 3
    build(root, msg)
    print("shown", flush=True)
    root.mainloop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
