"""What a pause window says (docs/screens-and-pauses.md), whatever draws it: Tk
(agent/windows/pause_window.py) or Win32 (agent/windows/pause_win32.py). Pure."""

from __future__ import annotations

import textwrap

from messages.pause import AgentPaused

TITLE = "Léa — replay en pause"
HEADLINE = "Léa a mis le replay en pause. Une personne doit intervenir."
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
    if msg.monitor_index is not None:
        # counted from 1 for the person; the index the agent and the workflow use beside it
        details.append(f"Écran : {msg.monitor_index + 1} (index {msg.monitor_index})")
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
