"""A replay's searches on the web set, with the agent's reader keeping strips by their
pixels (``python -m bench.grounding_speed --replay``, whose docstring says what is run).

A step's click leaves Chromium's focus ring around the control clicked (and takes it off
the one clicked before): the screen of the next step differs in those two places only.
Every search is timed whole (reading, matching, second looks) with a reader that lives
through the replay, as the agent's does; the same search's reading is compared with a
fresh reader's (nothing kept) on the same pixels: a kept reading that differs from it
is printed as a fault.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter, defaultdict
from typing import Any

from PIL import Image, ImageDraw

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.anchor import DEFAULT_MIN_SCORE, DEFAULT_SCALES
from agent.grounding.tesseract import TesseractReader
from agent.grounding.text import candidates, decide
from bench.grounding import anchor_of, floor_ms, inside
from bench.grounding_web import DATA, H, W, key, web_searches

REPLAY_STEPS = 8
REPLAY_STRIPS = (2, 4, 6)
RING = (16, 16, 16)
"""Chromium's focus ring: a dark line two pixels wide, two pixels outside the control."""


def focus_ring(screen: Image.Image, box: list[int]) -> Image.Image:
    """``screen`` with the focus ring around ``box`` (x, y, w, h)."""
    x, y, w, h = box
    out = screen.copy()
    ImageDraw.Draw(out).rectangle((x - 3, y - 3, x + w + 2, y + h + 2), outline=RING, width=2)
    return out


def steps_of(screens: list[dict[str, Any]], steps: int) -> dict[str, list[tuple[Any, ...]]]:
    """For each screen, ``steps`` searches a recorded step would make there (text and the
    recorded position) of controls in front, spread over the page."""
    by_screen: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    everything = json.loads((DATA / "labels.json").read_text())["screens"]
    wanted = {s["image"] for s in screens}
    # A moved layout's searches need the recorded layout of the same page.
    recorded = {key(s) for s in screens}
    for search in web_searches([s for s in everything if s["image"] in wanted or (
            s["layout"] == "recorded" and key(s) in recorded)], DATA, anchor_of):
        if search[0]["image"] in wanted and search[1] == "text+position" \
                and search[5] == "control":
            by_screen[search[0]["image"]].append(search)
    return {name: found[::max(1, len(found) // steps)][:steps]
            for name, found in by_screen.items()}


def labels_read(screen: dict[str, Any], words: list[Any]) -> Counter[str]:
    """How many controls in front of ``screen`` the reading alone finds where they are
    (the matching's first decision, before any second look), and how many elsewhere."""
    out: Counter[str] = Counter()
    for c in screen["controls"]:
        if c["behind"]:
            continue
        chosen = decide(candidates(words, c["text"]), c["text"]).chosen
        out["controls"] += 1
        if chosen is not None:
            out["right" if inside(c["box"], chosen.centre) else "elsewhere"] += 1
    return out


def replay(every: int, steps: int, counts: tuple[int, ...] | list[int]) -> int:
    screens = json.loads((DATA / "labels.json").read_text())["screens"][::every]
    chosen = steps_of(screens, steps)
    agents = {n: TesseractReader(strips=n) for n in counts}
    fresh = {n: TesseractReader(strips=n, keep=0) for n in counts}
    times: dict[tuple[int, str], list[float]] = defaultdict(list)
    read_strips: dict[int, list[int]] = defaultdict(list)
    faults: list[str] = []
    wrong: dict[int, int] = defaultdict(int)
    agree: dict[int, list[float]] = defaultdict(list)
    labels: dict[int, Counter[str]] = defaultdict(Counter)
    load_before = os.getloadavg()[0]
    for turn, s in enumerate(screens):
        base = Image.open(DATA / s["image"]).convert("RGB")
        order = list(counts) if turn % 2 == 0 else list(counts)[::-1]
        first_words: dict[int, set[tuple[Any, ...]]] = {}
        for n in order:
            reader, shot = agents[n], base
            for j, search in enumerate(chosen.get(s["image"], [])):
                before = reader.strips_read
                start = time.perf_counter()
                found = resolve_point(search[2], shot, (0, 0), (0, 0, W, H), DEFAULT_SCALES,
                                      DEFAULT_MIN_SCORE, TextSettings(
                                          reader.read, read_many=reader.read_many))
                times[n, "first" if j == 0 else "after"].append(
                    (time.perf_counter() - start) * 1000)
                if j:
                    read_strips[n].append(reader.strips_read - before)
                if found.found and not inside(search[3], (found.x or 0, found.y or 0)):
                    wrong[n] += 1
                kept, anew = reader.read(shot), fresh[n].read(shot)
                if kept != anew:
                    faults.append(f"{s['image']} step {j} strips {n}: the kept reading "
                                  "differs from a fresh one")
                if j == 0:
                    first_words[n] = {(w.text, w.box) for w in anew}
                    labels[n] += labels_read(s, anew)
                shot = focus_ring(base, search[3])
        if 2 in first_words:
            for n, words in first_words.items():
                agree[n].append(len(words & first_words[2]) / max(1, len(first_words[2])))
    floor = floor_ms()
    print(f"replay on the web set: {len(chosen)} pages x {steps} steps, a focus ring moved "
          f"by each click; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} "
          f"after; floor (capture 1920x1080 + grey, same run) p50 {floor:.1f} ms")
    for n in counts:
        every_search = times[n, "first"] + times[n, "after"]
        print(f"  {n} strips{' (the agent)' if n == 2 else ''}: time per search p50 "
              f"{statistics.median(every_search):.0f} ms, p90 "
              f"{statistics.quantiles(every_search, n=10)[-1]:.0f} ms; a page's first "
              f"search p50 {statistics.median(times[n, 'first']):.0f} ms, after a click p50 "
              f"{statistics.median(times[n, 'after']):.0f} ms (strips read again p50 "
              f"{statistics.median(read_strips[n] or [0]):.0f} of {n}); wrong-control "
              f"clicks {wrong[n]}; words as read in 2 strips "
              f"{100 * statistics.mean(agree[n] or [0]):.1f} %; controls in front whose "
              f"label the reading alone places on them {labels[n]['right']}/"
              f"{labels[n]['controls']}, elsewhere {labels[n]['elsewhere']}")
    print(f"  kept readings unlike a fresh reading of the same pixels: {len(faults)}")
    for line in faults[:10]:
        print("    " + line)
    for reader in [*agents.values(), *fresh.values()]:
        reader.close()
    return 1 if faults else 0
