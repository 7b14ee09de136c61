"""The recorded real-application set (record.py) as observations for the loop detector.

Each sequence folder holds ``NN-after.jpg`` (the agent's screenshot after step NN) and
``sequence.json``: per step what the dispatcher and the agent would send (action type,
target, parameters, ``actual_position``, ``site``) and whether the application's state
changed; ``stuck_from`` is the first step after which it never changes again (None:
progress to the end).

The set has five parts, each sequence in one:

- ``tuning``: what the detector is tuned on;
- ``held-out-1``: held out from the first batch (form and journal) by application: a
  sequence's *applications* are its noise, the programs running beside the one acted in
  (xclock, ``top``, xeyes...), which are what a detector tuned on one desktop must learn
  to ignore on another. A noise of that batch is held out when the first byte of its
  name's SHA-1 is divisible by 3 (``held_out``), fixed by the name alone. Its misses were
  looked at while the rules were tuned later, so it no longer proves that they
  generalise: it is reported as *seen*;
- ``held-out-2``: the second batch's sequences recorded (``record.py --part held-out-2``)
  after the rules were set, beside noises the tuning part never had. Its false pauses
  were looked at when a rule was added since: reported as *seen* too;
- ``held-out-3``: the same scenarios recorded (``record.py --part held-out-3``) after
  that rule was set, beside noises no other part had, the application acted in elsewhere
  on the screen. Its misses were looked at when the next rules were set: *seen* too;
- ``held-out-4``: the same scenarios recorded (``record.py --part held-out-4``) after
  those rules were set, the application larger and elsewhere again, beside noises no
  other part had. Its misses were looked at when the next rules were set: *seen* too;
- ``held-out-5``: the first batch's applications (the form, the journal, xterm) again
  (``record.py --part held-out-5``), elsewhere on the screen, beside noises no other part
  had; recorded while the last rules were set (the recorder runs no detector), never
  tuned on, its misses read only from the bench's printout.

The sequences of the second batch and after say their part in their sequence.json
(``"part": "tuning"``, ``"held-out-2"``, ...); the first batch's say nothing and are
split by ``held_out``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from messages.loop import ObserveStep

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "loop_real"


@dataclass(frozen=True)
class RealSequence:
    name: str
    noise: str
    scenario: str
    stuck_from: int | None
    meta: list[dict[str, Any]]
    frames: list[bytes]
    recorded_part: str | None = None
    """The part written by the recorder (second batch); None: split by noise."""

    @property
    def held_out(self) -> bool:
        return self.part != "tuning"

    @property
    def part(self) -> str:
        """``tuning``, ``held-out-1`` to ``held-out-4`` (seen while tuning), or
        ``held-out-5``."""
        if self.recorded_part is not None:
            return self.recorded_part
        return "held-out-1" if held_out(self.noise) else "tuning"

    def steps(self, replay_id: str) -> Iterator[ObserveStep]:
        for i, (m, frame) in enumerate(zip(self.meta, self.frames, strict=True)):
            yield ObserveStep(
                replay_id=replay_id, action_id=f"s{i}", base_action_id=f"s{i}",
                action_type=m["action_type"], target=m["target"], parameters=m["parameters"],
                actual_position=m.get("actual_position"), site=m.get("site"), success=True,
                screenshot_after=frame)


def load(folder: Path = DATA) -> list[RealSequence]:
    out = []
    for meta_file in sorted(folder.glob("*/sequence.json")):
        meta = json.loads(meta_file.read_text())
        frames = [(meta_file.parent / f"{i:02d}-after.jpg").read_bytes()
                  for i in range(len(meta["steps"]))]
        out.append(RealSequence(meta["name"], meta["noise"], meta["scenario"],
                                meta["stuck_from"], meta["steps"], frames,
                                meta.get("part")))
    return out


PARTS = ("tuning", "held-out-1", "held-out-2", "held-out-3", "held-out-4", "held-out-5")


def held_out(noise: str) -> bool:
    """Whether the first batch's sequences recorded beside ``noise`` are held out."""
    return hashlib.sha1(noise.encode()).digest()[0] % 3 == 0
