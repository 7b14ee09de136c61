#!/usr/bin/env python3
"""The loop detector on labelled screen sequences: a real-application set and a drawn one.

The real set (tests/data/loop_real/, recorded by bench/loop_real/record.py from real
programs under Xvfb) goes through the real core step by step as the running system feeds
it: the agent's 1280-wide JPEG, the action, the point clicked, the foreground window and
focus rectangles; every signal may fire. It prints false pauses on progress sequences
(target 0), stuck sequences detected within N=4 captures of the stuck behaviour starting
(target >= 95 %; each one missed is listed with what the detector saw), and ms per frame
beside the JPEG decode alone, in the same run.

The sequences come from bench/screens.py: *progress* ones (every step changes a little) and
*stuck* ones (nothing the workflow cares about changes after ``stuck_from`` steps, while
clocks, carets, spinners and counters go on), each as PNG and as JPEG at a random quality
per frame. Every frame goes through the real core (actors/loop_detector/core.py) as the
screenshot of a successful click on a different target, so only signal A can fire.

Per embedder it prints:
- false pauses: a detection on a progress sequence, or on a stuck one before N frozen
  captures exist (targets: 0);
- recall: stuck sequences detected by their last frame (target ≥ 99 %), and how many
  frozen captures it took;
- precision = correct detections / all detections;
- ms per frame (decode + measure) beside floors measured in the same run: decoding alone,
  and a plain numpy difference of two decoded 1920x1080 RGB frames (target pixel ≤ 10 ms).

``clip`` runs on the first ``--clip-sequences`` sequences when open_clip is installed, with
the checkpoint of ``RPA_LOOP_CLIP_PRETRAINED`` or, if unset, a random-init one written to a
temporary directory (a random CLIP is no judge of screens: that run measures the cost and
checks that the veto does not break signal A).

    python bench/loop_eval.py [--sequences 120] [--frames 10] [--clip-sequences 16]
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from loguru import logger  # noqa: E402
from PIL import Image  # noqa: E402

from actors.loop_detector.clip import ClipEmbedder, ClipUnavailable  # noqa: E402
from actors.loop_detector.config import LoopConfig  # noqa: E402
from actors.loop_detector.core import LoopDetectorCore  # noqa: E402
from actors.loop_detector.pixel import Frame, PixelEmbedder, tile_difference  # noqa: E402
from bench.loop_real.dataset import PARTS, RealSequence, load  # noqa: E402
from bench.screens import Sequence, encode, new_ambient, new_ui, render, sequences  # noqa: E402
from messages.loop import ObserveStep  # noqa: E402

PART_NOTES = {"tuning": "tuned on", "held-out-1": "held out, then seen while tuning",
              "held-out-2": "recorded after the rules were set, then seen while tuning",
              "held-out-3": "recorded after the label rule was set, then seen while tuning",
              "held-out-4": "recorded after the rules of a state seen were set, then seen"
                            " while tuning",
              "held-out-5": "other applications, never tuned on"}


class TimedPixel(PixelEmbedder):
    """The pixel embedder, timing its decode + reduction."""

    def __init__(self) -> None:
        super().__init__()
        self.last_ms = 0.0

    def frame(self, data: bytes) -> Frame:
        start = time.perf_counter()
        out = super().frame(data)
        self.last_ms = (time.perf_counter() - start) * 1000
        return out


@dataclass
class Tally:
    progress: int = 0
    stuck: int = 0
    false_pauses: int = 0
    false_on_progress: int = 0
    detected: int = 0
    missed: list[str] = field(default_factory=list)
    # Frozen captures until the pause, for sequences stuck from the start / after progress.
    latency: dict[str, list[int]] = field(
        default_factory=lambda: {"from the start": [], "after progress": []})
    ms: dict[str, list[float]] = field(default_factory=lambda: {"png": [], "jpeg": []})
    decode_ms: dict[str, list[float]] = field(default_factory=lambda: {"png": [], "jpeg": []})


def run(seqs: Iterable[Sequence], n: int, clip: ClipEmbedder | None = None) -> Tally:
    pixel = TimedPixel()
    config = LoopConfig(embedder="clip" if clip else "pixel")
    core = LoopDetectorCore(config, pixel, clip)
    tally = Tally()
    for s_index, seq in enumerate(seqs):
        replay = f"r{s_index}"
        first = None
        for i, data in enumerate(seq.frames):
            step = ObserveStep(replay_id=replay, action_id=f"s{i}", base_action_id=f"s{i}",
                               action_type="click", target={"by_text": f"bouton {i}"},
                               success=True, screenshot_after=data)
            start = time.perf_counter()
            verdict = core.observe(step).verdict
            tally.ms[seq.encoding].append((time.perf_counter() - start) * 1000)
            tally.decode_ms[seq.encoding].append(pixel.last_ms)
            if verdict.detected and first is None:
                first = i
        core.forget(replay)
        if seq.stuck_from is None:
            tally.progress += 1
            if first is not None:
                tally.false_pauses += 1
                tally.false_on_progress += 1
                print(f"  false pause: {seq.name} at frame {first}: {seq.steps}")
            continue
        tally.stuck += 1
        earliest = seq.stuck_from + n - 1
        if first is None:
            tally.missed.append(seq.name)
        elif first < earliest:
            tally.false_pauses += 1
            print(f"  early pause: {seq.name} at frame {first} < {earliest}: {seq.steps}")
        else:
            tally.detected += 1
            when = "from the start" if seq.stuck_from == 0 else "after progress"
            tally.latency[when].append(first - seq.stuck_from + 1)
    return tally


@dataclass
class RealTally:
    progress: int = 0
    stuck: int = 0
    false_pauses: list[str] = field(default_factory=list)
    detected: int = 0
    missed: list[str] = field(default_factory=list)
    latency: list[int] = field(default_factory=list)
    signals: dict[str, int] = field(default_factory=dict)
    ms: list[float] = field(default_factory=list)
    decode_ms: list[float] = field(default_factory=list)
    closest: list[int] = field(default_factory=list)
    """Per progress sequence, its longest run of transitions without progress (the margin:
    screen_static pauses at N-1)."""


def run_real(seqs: list[RealSequence], n: int) -> RealTally:
    """Each recorded sequence through the core; a pause must come within ``n`` captures of
    the stuck behaviour starting (stuck_from), and never on a progress sequence."""
    pixel = TimedPixel()
    core = LoopDetectorCore(LoopConfig(embedder="pixel"), pixel)
    tally = RealTally()
    for s_index, seq in enumerate(seqs):
        replay = f"real{s_index}"
        first, verdict, closest = None, None, 0
        for i, step in enumerate(seq.steps(replay)):
            start = time.perf_counter()
            v = core.observe(step).verdict
            tally.ms.append((time.perf_counter() - start) * 1000)
            tally.decode_ms.append(pixel.last_ms)
            if v.detected and first is None:
                first, verdict = i, v
            judged = core.judgement(replay)
            closest = max(closest, 0 if judged is None else judged.static_run)
        core.forget(replay)
        shown = "" if verdict is None else f"{verdict.signal} {verdict.evidence}"
        if seq.stuck_from is None:
            tally.progress += 1
            tally.closest.append(closest)
            if first is not None:
                tally.false_pauses.append(f"{seq.name} at step {first}: {shown}")
            continue
        tally.stuck += 1
        if first is not None and first < seq.stuck_from:
            tally.false_pauses.append(f"{seq.name} at step {first} < stuck_from "
                                      f"{seq.stuck_from}: {shown}")
        elif first is not None and first - seq.stuck_from + 1 <= n:
            tally.detected += 1
            tally.latency.append(first - seq.stuck_from + 1)
            assert verdict is not None
            tally.signals[verdict.signal] = tally.signals.get(verdict.signal, 0) + 1
        else:
            when = "never" if first is None else f"at step {first}"
            tally.missed.append(f"{seq.name} (stuck from step {seq.stuck_from}, of "
                                f"{len(seq.frames)}): {when} {shown}")
    return tally


def report_real(part: str, tally: RealTally, n: int, decode_floor: float) -> None:
    recall = tally.detected / tally.stuck if tally.stuck else float("nan")
    print(f"\n== real applications (tests/data/loop_real), {part}: {tally.progress} "
          f"progress + {tally.stuck} stuck sequences, agent JPEG 1280 wide")
    print(f"false pauses: {len(tally.false_pauses)} (progress sequences: {tally.progress})"
          "   target 0")
    for line in tally.false_pauses:
        print(f"  false pause: {line}")
    margin = {k: tally.closest.count(k) for k in sorted(set(tally.closest))}
    print(f"margin: progress sequences by their most steps in a row without progress "
          f"{margin} (screen_static pauses at {n - 1})")
    print(f"stuck detected within N={n} captures: {tally.detected}/{tally.stuck} = "
          f"{recall:.1%}   target >= 95%")
    if tally.latency:
        counts = {k: tally.latency.count(k) for k in sorted(set(tally.latency))}
        print(f"captures from the stuck behaviour's start to the pause: {counts}; "
              f"signals: {tally.signals}")
    for line in tally.missed:
        print(f"  missed: {line}")
    measure = [t - d for t, d in zip(tally.ms, tally.decode_ms, strict=True)]
    print(f"ms/frame: p50 {pct(tally.ms, 0.5):.2f} (p95 {pct(tally.ms, 0.95):.2f}) = "
          f"decode+reduce p50 {pct(tally.decode_ms, 0.5):.2f} + measure p50 "
          f"{pct(measure, 0.5):.2f}; floor: full JPEG decode alone {decode_floor:.2f} ms"
          "   target p50 <= 10 ms")


def jpeg_decode_floor(seqs: list[RealSequence]) -> float:
    """A full decode of the set's first frames (Pillow, RGB), in this run."""
    frames = [f for s in seqs[:5] for f in s.frames][:30]
    start = time.perf_counter()
    for data in frames:
        Image.open(io.BytesIO(data)).convert("RGB")
    return (time.perf_counter() - start) / max(1, len(frames)) * 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(name: str, tally: Tally, n: int) -> None:
    detections = tally.detected + tally.false_pauses
    precision = tally.detected / detections if detections else 1.0
    recall = tally.detected / tally.stuck if tally.stuck else float("nan")
    print(f"\n== {name}: {tally.progress} progress + {tally.stuck} stuck sequences")
    print(f"false pauses: {tally.false_pauses} (on progress sequences: "
          f"{tally.false_on_progress}/{tally.progress} = "
          f"{tally.false_on_progress / max(1, tally.progress):.1%})   target 0")
    print(f"recall on stuck: {tally.detected}/{tally.stuck} = {recall:.1%}   target >= 99%")
    print(f"precision: {precision:.1%}")
    for when, latency in tally.latency.items():
        if latency:
            counts = {k: latency.count(k) for k in sorted(set(latency))}
            print(f"frozen captures until the pause, stuck {when} (N={n} is the least): "
                  f"{counts}, median {statistics.median(latency):g}")
    if tally.missed:
        print(f"missed: {tally.missed}")
    for enc, ms in tally.ms.items():
        if ms:
            decode = tally.decode_ms[enc]
            measure = [total - d for total, d in zip(ms, decode, strict=True)]
            print(f"ms/frame {enc:4s}: p50 {pct(ms, 0.5):.2f} (p95 {pct(ms, 0.95):.2f}) = "
                  f"decode+reduce p50 {pct(decode, 0.5):.2f} + measure p50 "
                  f"{pct(measure, 0.5):.2f} (p95 {pct(measure, 0.95):.2f})")


def floors(rng: random.Random) -> None:
    """Decoding alone and a plain numpy difference of two frames, in this run."""
    ui, amb = new_ui(rng), new_ambient(rng)
    a_img, b_img = render(ui, amb), render(ui, amb.tick(rng))
    png, jpeg = encode(a_img, "png", rng), encode(a_img, "jpeg", rng)
    a = np.asarray(a_img, dtype=np.uint8)
    b = np.asarray(b_img, dtype=np.uint8)

    def timed(fn: object, repeat: int = 30) -> float:
        assert callable(fn)
        fn()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - start) / repeat * 1000

    diff = timed(lambda: np.abs(a.astype(np.int16) - b.astype(np.int16)))
    dec_png = timed(lambda: Image.open(io.BytesIO(png)).convert("RGB"))
    dec_jpeg = timed(lambda: Image.open(io.BytesIO(jpeg)).convert("RGB"))
    print(f"floor: numpy |a-b| of two 1920x1080 RGB frames {diff:.2f} ms; "
          f"full decode PNG {dec_png:.2f} ms, JPEG {dec_jpeg:.2f} ms")
    pixel = PixelEmbedder()
    noise = []
    for _ in range(20):
        image = render(new_ui(rng), new_ambient(rng))
        lossless = pixel.frame(encode(image, "png", rng))
        out = io.BytesIO()
        image.save(out, "JPEG", quality=50)
        noise.append(int(tile_difference(lossless, pixel.frame(out.getvalue())).max()))
    print(f"JPEG noise (quality 50) after reduction: max {max(noise)} grey levels per tile;"
          f" a tile changes above {pixel.params.level}")


def clip_embedder(tmp: Path) -> ClipEmbedder | None:
    model = os.environ.get("RPA_LOOP_CLIP_MODEL", "ViT-B-32")
    checkpoint = os.environ.get("RPA_LOOP_CLIP_PRETRAINED")
    try:
        if checkpoint is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import open_clip
            import torch
            random_init = open_clip.create_model(model, pretrained=None)
            checkpoint = str(tmp / f"{model}-random.pt")
            torch.save(random_init.state_dict(), checkpoint)
            print(f"clip: random-init {model} checkpoint written to {checkpoint}")
        embedder = ClipEmbedder(model, checkpoint)
        start = time.perf_counter()
        embedder.load()
        print(f"clip: {model} loaded in {time.perf_counter() - start:.1f} s")
        return embedder
    except (ImportError, ClipUnavailable) as exc:
        print(f"clip: skipped ({exc})")
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=120,
                        help="sequences generated, each as PNG and as JPEG (default 120)")
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--clip-sequences", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--real-only", action="store_true", help="only the real set")
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="WARNING", diagnose=False, backtrace=False)
    n = LoopConfig().screen_static_n
    real = load()
    floor = jpeg_decode_floor(real)
    print(f"real set in {len(PARTS)} parts (bench/loop_real/dataset.py), by the programs"
          " beside the one acted in:")
    for part in PARTS:
        noises = sorted({s.noise for s in real if s.part == part})
        print(f"  {part} ({PART_NOTES[part]}): {noises}")
    for part in PARTS:
        seqs = [s for s in real if s.part == part]
        if seqs:
            report_real(f"{part} part ({PART_NOTES[part]})", run_real(seqs, n), n, floor)
    if args.real_only:
        return 0
    print("\n== drawn screens (bench/screens.py)")
    rng = random.Random(args.seed)
    floors(rng)
    start = time.perf_counter()
    seqs = list(sequences(args.sequences, seed=args.seed, frames=args.frames))
    frames = sum(len(s.frames) for s in seqs)
    print(f"generated {len(seqs)} sequences, {frames} frames of 1920x1080 in "
          f"{time.perf_counter() - start:.0f} s")
    report("pixel", run(seqs, n), n)
    with tempfile.TemporaryDirectory() as tmp:
        clip = clip_embedder(Path(tmp)) if args.clip_sequences > 0 else None
        if clip is not None:
            subset = seqs[:args.clip_sequences]
            report("pixel+clip (veto)", run(subset, n, clip), n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
