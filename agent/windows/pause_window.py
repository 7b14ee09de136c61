"""The pause window: ``python -m agent.windows.pause_window`` reads an AgentPaused as JSON on stdin.

It runs as its own process (started by :mod:`agent.windows.pause_notice`), so the window never
shares a thread with the agent's loop and a window that fails cannot take the agent down;
closing it is ending the process. The text is never truncated (docs/screens-and-pauses.md):
a read-only text box sized to the content up to a cap, with a scrollbar from the cap on,
wrapping long lines. Tk draws it; on Windows, Win32 (:mod:`agent.windows.pause_win32`: the
embeddable CPython of the agent folder has no Tk).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agent.windows.pause_text import HEADLINE, TITLE, notice_text, text_box_size
from messages.pause import AgentPaused

__all__ = ["TITLE", "build", "main", "notice_text", "text_box_size"]  # what tests read


def build(root: Any, msg: AgentPaused) -> Any:
    """Fill ``root`` (a Tk) with the notice; the Text widget holding it."""
    import tkinter as tk

    text = notice_text(msg)
    cols, rows, scroll = text_box_size(text)
    root.title(TITLE)
    root.attributes("-topmost", True)
    frame = tk.Frame(root, padx=12, pady=10)
    frame.pack(fill="both", expand=True)
    tk.Label(frame, text=HEADLINE,
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
    if sys.platform == "win32":
        from agent.windows.pause_win32 import show

        try:
            return show(notice_text(msg))
        except OSError as exc:
            print(f"pause_window: no window: {exc}", file=sys.stderr)
            return 3
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
