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
import hashlib
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

from agent.anchor import DEFAULT_MIN_SCORE, DEFAULT_SCALES
from agent.executors.desktop_target import resolve_point
from agent.executors.desktop_text import TextSettings
from agent.grounding.second_look import MAX_NEAR_MISSES
from agent.grounding.tesseract import PSM, UPSCALE, TesseractReader
from agent.grounding.text import normalise
from bench.grounding_record import NOTES, H, W
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


Search = tuple[dict[str, Any], str, TargetSpec, list[int] | None, bool]


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

    def read(self, image: Image.Image) -> list[Any]:
        grey = image.convert("L")
        key = (grey.size, hashlib.blake2b(grey.tobytes(), digest_size=16).digest(),
               self.reader.upscale, self.reader.psm,
               tuple(sorted(self.reader.variables.items())))
        if key not in self.kept:
            self.kept[key] = self.reader.read(grey)
            self.new += 1
        return list(self.kept[key])

    def read_many(self, images: Sequence[Image.Image]) -> list[list[Any]]:
        return [self.read(image) for image in images]

    def save(self) -> None:
        if self.new:
            self.path.write_bytes(pickle.dumps(self.kept))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
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
    parser.add_argument("--psm", default=PSM,
                        help="Tesseract's page segmentation mode (agent: PSM)")
    parser.add_argument("--program", choices=("form", "mousepad"),
                        help="only this program's screens")
    args = parser.parse_args(argv)
    variables = dict(v.split("=", 1) for v in args.tesseract)
    screens = [s for s in json.loads((args.data / "labels.json").read_text())["screens"]
               if args.program in (None, program(s))]
    load_before = os.getloadavg()[0]
    # Every search reads its parts again: no reading kept from another search.
    reader = TesseractReader(upscale=args.upscale, keep=0, variables=variables,
                             psm=args.psm)
    kept = KeptReadings(reader, args.keep_readings) if args.keep_readings else None
    read_any = kept.read if kept is not None else reader.read
    read_all = kept.read_many if kept is not None else reader.read_many
    images, words, read_ms = {}, {}, {}
    for s in screens:
        images[s["image"]] = image = Image.open(args.data / s["image"]).convert("RGB")
        start = time.perf_counter()
        words[s["image"]] = read_any(image)
        read_ms[s["image"]] = (time.perf_counter() - start) * 1000
    floor = floor_ms()
    tally: Counter[str] = Counter()
    times, misses = [], []
    second: list[tuple[int, float]] = []  # per search: parts read again, their time
    rest: dict[str, list[float]] = {m: [] for m in (*MODES, "absent")}  # after the reading
    for s, mode, spec, expected, may_refuse in searches(screens, args.data):
        name = s["image"]
        # The whole monitor was read once above; a second look at a part is read now.
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
        found = resolve_point(spec, images[name], (0, 0), (0, 0, W, H), DEFAULT_SCALES,
                              DEFAULT_MIN_SCORE, TextSettings(read, read_many=read_many))
        rest[mode].append((time.perf_counter() - start) * 1000)
        times.append(read_ms[name] + rest[mode][-1])
        second.append((len(parts), sum(parts)))
        tally[f"{mode}: searches"] += 1
        tally[f"{mode}: expect"] += not may_refuse
        what = f"{name} {mode} {spec.by_text!r}"
        tally[f"{program(s)} {mode}: expect"] += not may_refuse
        if found.found:
            point = (found.x or 0, found.y or 0)
            if expected is not None and inside(expected, point):
                tally[f"{mode}: {'twins right' if may_refuse else 'right'}"] += 1
                tally[f"{program(s)} {mode}: right"] += not may_refuse
            else:
                tally["wrong-control clicks"] += 1
                misses.append(f"WRONG {what} -> {point} ({found.detail})")
        elif not may_refuse:
            there = " ".join(f"{w.text!r}{w.conf:.2f}" for w in words[name]
                             if expected is not None and inside(expected, (
                                 w.box[0] + w.box[2] / 2, w.box[1] + w.box[3] / 2)))
            misses.append(f"miss  {what} {expected}: {found.error} "
                          f"{(found.detail or '')[:200]} [read there: {there}]")
        else:
            tally[f"{mode}: no click"] += 1
            tally["ambiguous_target"] += found.error == "ambiguous_target"
        tally["near-miss cap"] += "to read again), e.g." in (found.detail or "")
    programs = sorted({program(s) for s in screens})
    print(f"set: {len(screens)} screens {W}x{H}, {sum(len(s['controls']) for s in screens)} "
          f"labelled controls of {'/'.join(programs)} (fr/en, 2 fonts, 100/125/150 %, "
          "recorded and moved layouts); "
          f"Tesseract {reader.version} {reader.langs} x{reader.upscale} psm {reader.psm} "
          f"{reader.variables}, "
          f"{reader.workers} "
          f"worker(s) on {os.cpu_count()} cores")
    # Searches where a click was expected (a twin without anchor may rightly not click).
    expect = {m: tally[f"{m}: expect"] for m in MODES}
    right = sum(tally[f"{m}: right"] for m in MODES)
    total = sum(expect[m] for m in MODES)
    print(f"found on the right control: {right}/{total} = {100 * right / max(total, 1):.1f} %"
          " (" + ", ".join(f"{m} {tally[f'{m}: right']}/{expect[m]}" for m in MODES) + ")")
    for p in programs:
        got = sum(tally[f"{p} {m}: right"] for m in MODES)
        of = sum(tally[f"{p} {m}: expect"] for m in MODES)
        print(f"  {p}: {got}/{of} = {100 * got / max(of, 1):.1f} %")
    print(f"wrong-control clicks: {tally['wrong-control clicks']}")
    refused = sum(tally[f"{m}: no click"] for m in MODES)
    print(f"ambiguous handled: text on screen twice, no click {refused} (ambiguous_target "
          f"{tally['ambiguous_target']}), twins told apart by position "
          f"{sum(tally[f'{m}: twins right'] for m in MODES)}; absent text, no click "
          f"{tally['absent: no click']}/{tally['absent: searches']}")
    print(f"time per search: p50 {statistics.median(times):.0f} ms, p90 "
          f"{statistics.quantiles(times, n=10)[-1]:.0f} ms; floor (capture 1920x1080 + "
          f"grey) p50 {floor:.1f} ms; load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after (the machine's other work slows both)")
    counts = [n for n, _ in second]
    print(f"second looks (parts read again) per search: p50 {statistics.median(counts):.0f},"
          f" p90 {statistics.quantiles(counts, n=10)[-1]:.0f}, max {max(counts)}; their time "
          f"p50 {statistics.median(t for _, t in second):.0f} ms, p90 "
          f"{statistics.quantiles([t for _, t in second], n=10)[-1]:.0f} ms; the full-screen "
          f"read p50 {statistics.median(read_ms.values()):.0f} ms; more near misses than "
          f"the cap ({MAX_NEAR_MISSES}), no click: {tally['near-miss cap']}")
    print("after the full-screen read (matching, anchor, readings closer, second looks): "
          + ", ".join(f"{m} p50 {statistics.median(t):.0f} ms, p90 "
                      f"{statistics.quantiles(t, n=10)[-1]:.0f} ms"
                      for m, t in rest.items() if len(t) > 1))
    if kept is not None:
        kept.save()
    for line in misses if args.verbose else misses[:15]:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
