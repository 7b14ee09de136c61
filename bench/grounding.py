"""Text grounding measured on the recorded set (tests/data/grounding, bench/grounding_record.py).

    python -m bench.grounding [--data DIR] [--verbose]

Every control of every screen is searched by its text, the way the agent does it
(agent.grounding: Tesseract, then agent.grounding.text's matching and decision):

- *with position*: the position recorded is the control's centre on the ``recorded``
  layout of the same language, font and scaling; on the ``moved`` layout the control is
  elsewhere now, and the recorded position is only a hint;
- *text only*: no position (for a text that is on the screen more than once, the right
  answer is ``ambiguous_target``: no click);
- *absent*: labels that are on no screen: the right answer is no click.

A click is on the right control when the point lies in the box Tk reported for it; any
other click is a wrong-control click. Time per search = one OCR of the whole 1920x1080
monitor + the matching, beside a floor measured in the same run: one capture of a
1920x1080 monitor of a real X display (Xvfb) and its grey conversion.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import pickle
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.anchor import DEFAULT_MIN_SCORE, DEFAULT_SCALES
from agent.grounding.tesseract import PSM, STRIPS, UPSCALE, TesseractReader, pixel_key
from agent.grounding.text import normalise
from bench.grounding_record import NOTES, H, W
from bench.grounding_web import DATA as WEB_DATA
from bench.grounding_web import web_searches
from bench.web_pages import PAGES, PARTS
from messages.workflow import TargetSpec
from tests.fixtures.labelled_form import TEXTS

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "grounding"
ABSENT = {"fr": ["Valider la prescription", "Sortie définitive", "Exporter en PDF",
                 "Planning du bloc", "Ordonnance"],
          "en": ["Approve prescription", "Final discharge", "Export to PDF",
                 "Theatre schedule", "Prescription"]}
FLOOR_RUNS = 20
ANCHOR_CONTEXT = (40, 10)
MODES = ("text+position+anchor", "text+position", "text only")


def inside(box: list[int], point: tuple[float, float]) -> bool:
    x, y, w, h = box
    return x <= point[0] < x + w and y <= point[1] < y + h


def floor_ms() -> float:
    """p50 of one capture of a 1920x1080 monitor + grey conversion, on a real X display."""
    import mss

    from tests.xdisplay import start_xdisplay

    display = start_xdisplay([(1920, 1080, 0, 0)])
    try:
        with mss.MSS(display=display.display) as sct:
            runs = []
            for _ in range(FLOOR_RUNS):
                start = time.perf_counter()
                raw = sct.grab({"left": 0, "top": 0, "width": 1920, "height": 1080})
                Image.frombytes("RGB", raw.size, raw.bgra, "raw", "BGRX").convert("L")
                runs.append((time.perf_counter() - start) * 1000)
    finally:
        display.close()
    return statistics.median(runs)


def anchor_of(screen: Image.Image, box: list[int]) -> str:
    """What a recorder keeps beside the text: the control and a little around it, PNG."""
    x, y, w, h = box
    crop = screen.crop((max(0, x - ANCHOR_CONTEXT[0]), max(0, y - ANCHOR_CONTEXT[1]),
                        x + w + ANCHOR_CONTEXT[0], y + h + ANCHOR_CONTEXT[1]))
    out = io.BytesIO()
    crop.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def twins(screen: dict[str, Any]) -> set[str]:
    """Texts on the screen more than once: twin controls, the title (in the title bar
    too), words of the notes in the terminal."""
    counts = Counter(c["text"] for c in screen["controls"])
    notes = normalise(NOTES[screen["lang"]])
    title = TEXTS[screen["lang"]]["title"] if program(screen) == "form" else None
    return {t for t in counts if counts[t] > 1 or t == title
            or f" {normalise(t)} " in f" {notes} "}


def program(screen: dict[str, Any]) -> str:
    """The program recorded on the screen (a set recorded before mousepad: the form)."""
    return str(screen.get("program", "form"))


Search = tuple[Any, ...]


def searches(screens: list[dict[str, Any]], data: Path) -> list[Search]:
    """(screen, mode, target spec, the box to click in (None: no click expected), whether
    not clicking is right too: a twin with nothing but a position may stay undecided)."""
    recorded = {(program(s), s["lang"], s["font"], s["scaling"]): s for s in screens
                if s["layout"] == "recorded"}
    out: list[Search] = []
    for s in screens:
        origin = recorded[(program(s), s["lang"], s["font"], s["scaling"])]
        shot = Image.open(data / origin["image"]).convert("RGB")
        doubles = twins(s)
        seen: Counter[str] = Counter()
        for c in s["controls"]:
            text = c["text"]
            # The same control on the recorded layout: same text, same rank among its twins.
            seen[text] += 1
            box = [o for o in origin["controls"] if o["text"] == text][seen[text] - 1]["box"]
            x, y, w, h = box
            at = {"x_pct": (x + w / 2) / W, "y_pct": (y + h / 2) / H}
            twin = text in doubles
            out.append((s, "text+position+anchor", TargetSpec(
                by_text=text, anchor_image_base64=anchor_of(shot, box), **at), c["box"],
                False))
            out.append((s, "text+position", TargetSpec(by_text=text, **at), c["box"], twin))
            out.append((s, "text only", TargetSpec(by_text=text), c["box"], twin))
        for text in ABSENT[s["lang"]]:
            out.append((s, "absent", TargetSpec(by_text=text), None, True))
    return out


class KeptReadings:
    """Every reading of ``reader`` kept in ``path`` by its pixels (and the reader's scale
    and variables), so that the matcher can be run again on the set in seconds: its times
    are then not a search's (``--keep-readings``)."""

    def __init__(self, reader: TesseractReader, path: Path) -> None:
        self.reader, self.path = reader, path
        self.kept: dict[tuple[Any, ...], list[Any]] = (
            pickle.loads(path.read_bytes()) if path.is_file() else {})
        self.new = 0

    def key(self, grey: Image.Image) -> tuple[Any, ...]:
        return (*pixel_key(grey), self.reader.upscale, self.reader.psm, self.reader.strips,
                tuple(sorted(self.reader.variables.items())))

    def read(self, image: Image.Image) -> list[Any]:
        return self.read_many([image])[0]

    def read_many(self, images: Sequence[Image.Image]) -> list[list[Any]]:
        """As the reader's: the parts not kept yet read at once."""
        greys = [image.convert("L") for image in images]
        keys = [self.key(grey) for grey in greys]
        todo = [i for i, key in enumerate(keys) if key not in self.kept]
        if todo:
            read = self.reader.read_many([greys[i] for i in todo]) if len(todo) > 1 \
                else [self.reader.read(greys[todo[0]])]
            for i, words in zip(todo, read, strict=True):
                self.kept[keys[i]] = words
            self.new += len(todo)
        return [list(self.kept[key]) for key in keys]

    def save(self) -> None:
        if self.new:
            self.path.write_bytes(pickle.dumps(self.kept))


Outcome = tuple[Any, ...]
"""(search, found, time of the search in ms, time after the whole reading, second looks:
how many parts, their time, the words of the whole reading, the time of the search when
the reading of its screen is kept from the screen's first search)."""


def run(screens: list[dict[str, Any]], data: Path, found_searches: list[tuple[Any, ...]],
        read_any: Any, read_all: Any) -> tuple[list[Outcome], dict[str, float]]:
    """Every search of ``found_searches`` on its screen, the whole monitor read once per
    screen (its time added to each search's)."""
    images, words, read_ms, recall_ms = {}, {}, {}, {}
    for s in screens:
        images[s["image"]] = image = Image.open(data / s["image"]).convert("RGB")
        start = time.perf_counter()
        words[s["image"]] = read_any(image)
        read_ms[s["image"]] = (time.perf_counter() - start) * 1000
        # What a kept reading costs: the pixels made grey and digested (the reader's key).
        start = time.perf_counter()
        pixel_key(image.convert("L"))
        recall_ms[s["image"]] = (time.perf_counter() - start) * 1000
    out: list[Outcome] = []
    warmed: set[str] = set()
    for search in found_searches:
        name = search[0]["image"]
        parts: list[float] = []

        def read(image: Image.Image, name: str = name, parts: list[float] = parts) -> Any:
            if image is images[name]:  # the whole monitor, read once above
                return words[name]
            start = time.perf_counter()
            try:
                return read_any(image)
            finally:
                parts.append((time.perf_counter() - start) * 1000)

        def read_many(images: Sequence[Image.Image], parts: list[float] = parts) -> Any:
            start = time.perf_counter()
            try:
                return read_all(images)
            finally:  # read at once: their time is shared out
                parts.extend([(time.perf_counter() - start) * 1000 / len(images)]
                             * len(images))

        start = time.perf_counter()
        found = resolve_point(search[2], images[name], (0, 0), (0, 0, W, H), DEFAULT_SCALES,
                              DEFAULT_MIN_SCORE, TextSettings(read, read_many=read_many))
        after = (time.perf_counter() - start) * 1000
        # The agent keeps a reading by its pixels: on a screen unchanged since the last
        # search (the next step of a replay on the same page), only the first pays it.
        warm = after + (read_ms[name] if name not in warmed else recall_ms[name])
        warmed.add(name)
        out.append((search, found, read_ms[name] + after, after, len(parts), sum(parts),
                    words[name], warm))
    return out, read_ms


def report(outcomes: list[Outcome], group: Any, verbose: bool) -> None:
    """The figures of one set, by ``group(screen)`` (a program, a part)."""
    tally: Counter[str] = Counter()
    misses = []
    modes = list(dict.fromkeys(o[0][1] for o in outcomes if o[0][1] != "absent"))
    for (s, mode, spec, expected, may_refuse, *kind), found, _, _, _, _, words, _ in outcomes:
        g = group(s)
        kind = kind[0] if kind else ("absent" if mode == "absent" else "control")
        tally[f"{g} {mode}: expect"] += not may_refuse
        what = f"{s['image']} {mode} {spec.by_text!r}" + (
            f" near {spec.near_text!r}" if spec.near_text else "")
        if found.found:
            point = (found.x or 0, found.y or 0)
            if expected is not None and inside(expected, point):
                tally[f"{g} {mode}: {'twins right' if may_refuse else 'right'}"] += 1
            else:
                tally[f"{g} wrong-control clicks"] += 1
                misses.append(f"WRONG {what} -> {point} ({found.detail})")
        elif not may_refuse:
            there = " ".join(f"{w.text!r}{w.conf:.2f}" for w in words
                             if expected is not None and inside(expected, (
                                 w.box[0] + w.box[2] / 2, w.box[1] + w.box[3] / 2)))
            misses.append(f"miss  {what} {expected}: {found.error} "
                          f"{(found.detail or '')[:200]} [read there: {there}]")
        else:
            tally[f"{g} {kind}: no click"] += 1
            tally[f"{g} ambiguous_target"] += found.error == "ambiguous_target"
        tally[f"{g} {kind}: searches"] += 1
        tally[f"{g} near-miss cap"] += "to read again), e.g." in (found.detail or "")
    groups = list(dict.fromkeys(group(o[0][0]) for o in outcomes))
    for g in groups:
        expect = {m: tally[f"{g} {m}: expect"] for m in modes}
        right = sum(tally[f"{g} {m}: right"] for m in modes)
        total = sum(expect.values())
        mine = [o for o in outcomes if group(o[0][0]) == g]
        times = [o[2] for o in mine]
        print(f"  {g}: right control {right}/{total} = {100 * right / max(total, 1):.1f} % ("
              + ", ".join(f"{m} {tally[f'{g} {m}: right']}/{expect[m]}" for m in modes)
              + f"); wrong-control clicks {tally[f'{g} wrong-control clicks']}")
        twins = sum(tally[f"{g} {m}: twins right"] for m in modes)
        print(f"    no click where it may be right: {tally[f'{g} control: no click']} "
              f"(ambiguous_target {tally[f'{g} ambiguous_target']}), twins told apart "
              f"{twins}; behind a dialog, no click {tally[f'{g} behind: no click']}/"
              f"{tally[f'{g} behind: searches']}; absent text, no click "
              f"{tally[f'{g} absent: no click']}/{tally[f'{g} absent: searches']}; over "
              f"the near-miss cap {tally[f'{g} near-miss cap']}")
        counts = [o[4] for o in mine]
        warm = [o[7] for o in mine]
        print(f"    time per search p50 {statistics.median(times):.0f} ms, p90 "
              f"{statistics.quantiles(times, n=10)[-1]:.0f} ms (each reading the monitor); "
              f"with the reading kept while the screen is unchanged (one per screen) p50 "
              f"{statistics.median(warm):.0f} ms, p90 "
              f"{statistics.quantiles(warm, n=10)[-1]:.0f} ms; second looks p50 "
              f"{statistics.median(counts):.0f}, p90 "
              f"{statistics.quantiles(counts, n=10)[-1]:.0f}, max {max(counts)}, their time "
              f"p50 {statistics.median(o[5] for o in mine):.0f} ms")
    for line in misses if verbose else misses[:15]:
        print("    " + line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--web-data", type=Path, default=WEB_DATA)
    parser.add_argument("--set", choices=("desktop", "web", "both"), default="both",
                        help="the Tk/mousepad set, the web set or both")
    parser.add_argument("--part", choices=PARTS, help="only this part of the web set")
    parser.add_argument("--page", choices=PAGES, help="only this page of the web set")
    parser.add_argument("--verbose", action="store_true", help="print every miss")
    parser.add_argument("--upscale", type=float, default=UPSCALE,
                        help="the scale screens are read at (agent: UPSCALE)")
    parser.add_argument("--tesseract", action="append", default=[], metavar="VAR=VALUE",
                        help="a Tesseract variable set at load, over the agent's (to "
                        "compare)")
    parser.add_argument("--keep-readings", type=Path, metavar="FILE",
                        help="keep every reading in FILE by its pixels and reuse them "
                        "(to rerun the matcher fast; the times printed are then not a "
                        "search's)")
    parser.add_argument("--strips", type=int, default=STRIPS,
                        help="the strips the whole monitor is read as (agent: STRIPS)")
    parser.add_argument("--psm", default=PSM,
                        help="Tesseract's page segmentation mode (agent: PSM)")
    parser.add_argument("--program", choices=("form", "mousepad"),
                        help="only this program's screens")
    args = parser.parse_args(argv)
    variables = dict(v.split("=", 1) for v in args.tesseract)
    load_before = os.getloadavg()[0]
    # Every search reads its parts again: no reading kept from another search.
    reader = TesseractReader(upscale=args.upscale, keep=0, variables=variables,
                             psm=args.psm, strips=args.strips)
    kept = KeptReadings(reader, args.keep_readings) if args.keep_readings else None
    read_any = kept.read if kept is not None else reader.read
    read_all = kept.read_many if kept is not None else reader.read_many
    print(f"Tesseract {reader.version} {reader.langs} x{reader.upscale} psm {reader.psm} "
          f"{reader.variables}, {reader.workers} worker(s) on {os.cpu_count()} cores, "
          f"{reader.strips} strips")
    all_times: list[float] = []
    if args.set in ("desktop", "both"):
        screens = [s for s in json.loads((args.data / "labels.json").read_text())["screens"]
                   if args.program in (None, program(s))]
        outcomes, read_ms = run(screens, args.data, list(searches(screens, args.data)),
                                read_any, read_all)
        print(f"desktop set: {len(screens)} screens {W}x{H}, "
              f"{sum(len(s['controls']) for s in screens)} labelled controls (fr/en, 2 "
              "fonts, 100/125/150 %, recorded and moved layouts); full-screen read p50 "
              f"{statistics.median(read_ms.values()):.0f} ms")
        report(outcomes, program, args.verbose)
        all_times += [o[2] for o in outcomes]
    if args.set in ("web", "both"):
        screens = [s for s in json.loads((args.web_data / "labels.json").read_text())[
            "screens"] if args.part in (None, s["part"]) and args.page in (None, s["page"])]
        outcomes, read_ms = run(screens, args.web_data,
                                web_searches(screens, args.web_data, anchor_of),
                                read_any, read_all)
        print(f"web set: {len(screens)} screens {W}x{H} of Chromium (6 pages, 100/125/150 "
              f"%, page alone and in a window, recorded and moved layouts), "
              f"{sum(len(s['controls']) for s in screens)} labelled controls; full-screen "
              f"read p50 {statistics.median(read_ms.values()):.0f} ms")
        report(outcomes, lambda s: f"web {s['part']}", args.verbose)
        all_times += [o[2] for o in outcomes]
    floor = floor_ms()
    print(f"floor (capture 1920x1080 + grey) p50 {floor:.1f} ms; load average "
          f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after (the machine's other "
          "work slows both)")
    if kept is not None:
        kept.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
