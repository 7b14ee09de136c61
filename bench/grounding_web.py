"""The searches of the web set (tests/data/grounding_web, bench/grounding_web_record.py),
the way ``bench.grounding`` runs them.

Every control in front is searched three ways (text + recorded position + anchor cut from
the recorded layout of the same page, zoom and mode; text + position; text only), and a
control of a table's row or of a card also by its text and the row's (``text+row``: the
row's first cell or the card's heading, ``target_spec.near_text``). A control behind a
modal dialog is searched the same three ways and the right answer is no click (when the
dialog holds a control of the same text, that one is the target and is searched instead);
a twin's anchor may match its other copies alike, so no click is right for it too;
five absent labels per screen. A label is a *twin* when its text is on the screen in front
more than once (another control, a heading, a cell): then a search with no anchor and no
row may rightly not click.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from PIL import Image

from agent.grounding.text import normalise
from bench.web_pages import ABSENT
from messages.workflow import TargetSpec

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "grounding_web"
W, H = 1920, 1080


def key(screen: dict[str, Any]) -> tuple[str, str, str, int]:
    return screen["part"], screen["page"], screen["mode"], screen["scaling"]


def web_searches(screens: list[dict[str, Any]], data: Path,
                 anchor_of: Any) -> list[tuple[Any, ...]]:
    """(screen, mode, target spec, the box to click in or None, whether not clicking is
    right too, the kind: control, behind or absent)."""
    recorded = {key(s): s for s in screens if s["layout"] == "recorded"}
    out: list[tuple[Any, ...]] = []
    for s in screens:
        origin = recorded[key(s)]
        shot = Image.open(data / origin["image"]).convert("RGB")
        front = Counter(normalise(t["text"]) for t in [*s["texts"], *s["controls"]]
                        if not t["behind"])
        front_controls = {normalise(c["text"]) for c in s["controls"] if not c["behind"]}
        seen: Counter[tuple[str, bool]] = Counter()
        for c in s["controls"]:
            text, behind = c["text"], c["behind"]
            seen[text, behind] += 1
            same = [o for o in origin["controls"] if o["text"] == text
                    and o["behind"] == behind]
            if len(same) < seen[text, behind]:
                continue  # off the recorded layout's window: no position nor anchor
            box = same[seen[text, behind] - 1]["box"]
            if behind and normalise(text) in front_controls:
                continue  # the dialog's own control of that text is the target
            x, y, w, h = box
            cx, cy, cw, ch = c["box"]
            if not (0 <= x + w / 2 < W and 0 <= y + h / 2 < H
                    and 0 <= cx + cw / 2 < W and 0 <= cy + ch / 2 < H):
                continue  # cut by the screen's edge, here or where it was recorded
            at = {"x_pct": (x + w / 2) / W, "y_pct": (y + h / 2) / H}
            expected = None if behind else c["box"]
            twin = behind or front[normalise(text)] > 1
            kind = "behind" if behind else "control"
            # A twin's anchor (a row's button and a little around it) may match every
            # row alike: it then chooses nothing, and no click is right too.
            out.append((s, "text+position+anchor", TargetSpec(
                by_text=text, anchor_image_base64=anchor_of(shot, box), **at), expected,
                twin, kind))
            out.append((s, "text+position", TargetSpec(by_text=text, **at), expected, twin,
                        kind))
            out.append((s, "text only", TargetSpec(by_text=text), expected, twin, kind))
            if c["row"] and not behind:
                out.append((s, "text+row", TargetSpec(by_text=text, near_text=c["row"]),
                            expected, False, kind))
        for text in ABSENT:
            out.append((s, "absent", TargetSpec(by_text=text), None, True, "absent"))
    return out
