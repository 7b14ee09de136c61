"""What makes one full-screen reading faster: reader options against each other; and a
replay's searches on the web set, with the reading kept strip by strip.

    python -m bench.grounding_speed [--data DIR] [--every N] [--rounds R]
    python -m bench.grounding_speed --replay [--every N] [--steps K] [--strips S ...]

Every Nth screen of the recorded set (tests/data/grounding) is read whole by Tesseract
readers that differ by one option, in turns (the order alternates from screen to screen,
so the machine's other work falls on all of them alike). Printed per option: the median
time of a reading, the median of its ratio to the agent's reading on the same screen, and
the words read. Whether an option keeps the labels found is bench/grounding.py's question.

``--replay`` (bench/grounding_replay.py): every Nth screen of the web set
(tests/data/grounding_web) is a page a replay acts on for K steps; each step's click
leaves a focus ring around the control clicked, so the next step searches a screen that
changed in one place. Each search is timed whole, by the agent's reader (which keeps the
strips it read by their pixels), for each number of strips; and each step's reading is
checked against a fresh reader's reading of the same pixels.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from PIL import Image

from agent.grounding.tesseract import TesseractReader
from bench.grounding import DATA, floor_ms
from bench.grounding_replay import REPLAY_STEPS, REPLAY_STRIPS, replay

DICTIONARIES = {"load_system_dawg": "1", "load_freq_dawg": "1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--every", type=int, help="every Nth screen (default 3; with "
                        "--replay 7: every page, zoom and mode of both parts)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--replay", action="store_true",
                        help="a replay's searches on the web set (module docstring)")
    parser.add_argument("--steps", type=int, default=REPLAY_STEPS,
                        help="steps of a replay on each page (--replay)")
    parser.add_argument("--strips", type=int, action="append",
                        help="a number of strips to compare (--replay; default "
                        f"{' '.join(map(str, REPLAY_STRIPS))})")
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.every or 7, args.steps, args.strips or REPLAY_STRIPS)
    screens = json.loads((args.data / "labels.json").read_text())["screens"][::args.every or 3]
    images = [Image.open(args.data / s["image"]).convert("RGB") for s in screens]
    readers = {
        "agent (the whole monitor)": TesseractReader(keep=0),
        "blank margins not read": TesseractReader(keep=0, crop_blank=True),
        "dictionaries loaded": TesseractReader(keep=0, variables=DICTIONARIES),
        "x1.5 instead of x1.25": TesseractReader(keep=0, upscale=1.5),
        "sparse text (psm 11) instead of one block": TesseractReader(keep=0, psm="SPARSE_TEXT"),
        "bilinear instead of bicubic upscaling": TesseractReader(
            keep=0, resample=Image.Resampling.BILINEAR),
    }
    times: dict[str, list[float]] = {name: [] for name in readers}
    words: dict[str, int] = dict.fromkeys(readers, 0)
    load_before = os.getloadavg()[0]
    for turn in range(args.rounds):
        for i, image in enumerate(images):
            names = list(readers) if (i + turn) % 2 == 0 else list(readers)[::-1]
            for name in names:
                start = time.perf_counter()
                read = readers[name].read(image)
                times[name].append((time.perf_counter() - start) * 1000)
                words[name] += len(read) if turn == 0 else 0
    base = times["agent (the whole monitor)"]
    floor = floor_ms()
    print(f"{len(images)} screens x {args.rounds} rounds; load average {load_before:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after; floor (capture 1920x1080 + grey, same "
          f"run) p50 {floor:.1f} ms")
    for name, ms in times.items():
        ratio = statistics.median(a / b for a, b in zip(ms, base, strict=True))
        print(f"  {name}: p50 {statistics.median(ms):.0f} ms, x{ratio:.2f} of the agent's, "
              f"{words[name]} words")
    for reader in readers.values():
        reader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
