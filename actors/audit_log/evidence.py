"""Which screenshot files a verified chain says must still be on disk (pure).

Retention removes image files but keeps their hashes, and writes a ``screenshots_pruned``
record whose ``data.cutoff`` is the time before which a file was last referenced. So a file
may be missing only if such a record comes after the last record referencing it, with a
cutoff after that record's ``stored_at``; any other missing (or changed) file is a problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from actors.audit_log.chain import ChainRecord
from messages.audit import RESERVED_SOURCE

PRUNE_KIND = "screenshots_pruned"
FileState = Literal["ok", "missing", "corrupt", "locked"]


@dataclass(frozen=True, slots=True)
class Reference:
    """The last record that references an image."""

    seq: int
    record_id: str
    name: str
    stored_at: float


@dataclass(frozen=True, slots=True)
class ScreenshotProblem:
    sha256: str
    reference: Reference
    state: FileState

    def describe(self) -> str:
        ref = self.reference
        what = {"missing": "missing and not pruned",
                "locked": "not readable: its key is not in the image keyring",
                }.get(self.state, "changed (it no longer opens with its key, or no longer "
                                  "gives its hash)")
        return (f"seq {ref.seq} (record_id {ref.record_id}): screenshot {ref.name!r} "
                f"{self.sha256}: {what}")


@dataclass(slots=True)
class Evidence:
    """Fed every verified record in order; then tells which files are expected."""

    last_ref: dict[str, Reference] = field(default_factory=dict)
    prunes: list[tuple[int, float]] = field(default_factory=list)  # (seq, cutoff)

    def add(self, record: ChainRecord) -> None:
        for name, digest in record.screenshots.items():
            self.last_ref[digest] = Reference(record.seq, record.record_id, name,
                                              record.stored_at)
        if record.source == RESERVED_SOURCE and record.kind == PRUNE_KIND:
            cutoff = record.data.get("cutoff")
            if isinstance(cutoff, int | float):
                self.prunes.append((record.seq, float(cutoff)))

    def pruned(self, digest: str) -> bool:
        """Whether a prune record explains the absence of this image."""
        ref = self.last_ref[digest]
        return any(seq > ref.seq and cutoff > ref.stored_at for seq, cutoff in self.prunes)

    def problems(self, state_of: dict[str, FileState]) -> list[ScreenshotProblem]:
        """The referenced images whose file is corrupt or locked, or missing without a
        prune."""
        found = []
        for digest, ref in self.last_ref.items():
            state = state_of.get(digest, "missing")
            if state in ("corrupt", "locked") or (state == "missing" and not self.pruned(digest)):
                found.append(ScreenshotProblem(digest, ref, state))
        return sorted(found, key=lambda p: p.reference.seq)
