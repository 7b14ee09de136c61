"""Screenshot files, content-addressed: ``<root>/ab/abcdef...`` named by the sha256 of the
image, each stored encrypted with the keyring's current key (image_keys.py, image_seal.py).

A file is written to a temporary name, fsync'ed, renamed into place and its directory
fsync'ed, all before the database commit that references it: a record acknowledged never
points to a file that a crash can lose. A kill -9 may leave a temporary file or an
unreferenced image behind; both are harmless (the first is removed at start, the second is
reused if the same image comes again).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from actors.audit_log.evidence import FileState
from actors.audit_log.image_keys import ImageCipher
from actors.audit_log.image_seal import ImageUndecryptable, KeyUnavailable, sealed_size
from runtime.durability import fsync_dir, write_synced

_TMP_PREFIX = ".tmp-"
_WRITERS = 16


def digest_of(image: bytes) -> str:
    return hashlib.sha256(image).hexdigest()


def content_state(cipher: ImageCipher, digest: str, blob: bytes) -> FileState:
    """Whether a stored image opens and gives its name: ``ok``, ``corrupt`` (changed, or
    not sealed with the key it names) or ``locked`` (its key is not in the keyring)."""
    try:
        image = cipher.open(digest, blob)
    except KeyUnavailable:
        return "locked"
    except ImageUndecryptable:
        return "corrupt"
    return "ok" if digest_of(image) == digest else "corrupt"


def _write_synced(item: tuple[Path, bytes]) -> None:
    """Write to a temporary name, fsync, rename into place (the directory is synced after)."""
    path, image = item
    write_synced(path, image, path.parent / f"{_TMP_PREFIX}{os.getpid()}-{path.name}")


class ScreenshotFiles:
    """The image files under ``root``, sealed and opened with ``cipher``."""

    def __init__(self, root: Path, cipher: ImageCipher) -> None:
        self.root, self.cipher = root, cipher
        self._pool: ThreadPoolExecutor | None = None

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def put_many(self, images: Iterable[bytes]) -> dict[str, int]:
        """Store each image durably (once); returns digest → size of each.

        The files are written and fsync'ed on a few threads at once: the file system then
        commits them together, where one after the other each waits for its own flush.
        Every image is sealed before any is written: without a key (KeyUnavailable) nothing
        is.
        """
        stored: dict[str, int] = {}
        todo: list[tuple[Path, bytes]] = []
        dirty: set[Path] = set()
        for image in images:
            digest = digest_of(image)
            if digest in stored:
                continue
            stored[digest] = len(image)
            path = self.path(digest)
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_size == sealed_size(self.cipher.current or "", len(image)):
                    continue  # already there, sealed (content-addressed: same name)
            if not path.parent.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                dirty.add(path.parent.parent)
            todo.append((path, self.cipher.seal(digest, image)))
            dirty.add(path.parent)
        if todo:
            list(self._threads().map(_write_synced, todo))  # raises the first failure
            ordered = sorted(dirty, key=lambda p: -len(p.parts))  # children first
            list(self._threads().map(fsync_dir, ordered))
        return stored

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(_WRITERS, thread_name_prefix="audit-files")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def read(self, digest: str) -> bytes:
        """The image; FileNotFoundError if its file is not there, KeyUnavailable or
        ImageUndecryptable if it does not open."""
        return self.cipher.open(digest, self.path(digest).read_bytes())

    def remove(self, digest: str) -> int:
        """Delete an image file; the bytes freed (0 if it was not there)."""
        path = self.path(digest)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def present(self, digests: set[str]) -> set[str]:
        return {d for d in digests if self.exists(d)}

    def state(self, digest: str, check_content: bool = True) -> FileState:
        """``missing``, or :func:`content_state` (just ``ok`` without ``check_content``)."""
        path = self.path(digest)
        if not path.is_file():
            return "missing"
        if not check_content:
            return "ok"
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return "missing"
        return content_state(self.cipher, digest, blob)

    def digests(self) -> Iterable[str]:
        """Every image file present."""
        if not self.root.is_dir():
            return
        for sub in self.root.iterdir():
            if sub.is_dir():
                yield from (f.name for f in sub.iterdir() if not f.name.startswith(_TMP_PREFIX))

    def remove_leftovers(self) -> int:
        """Remove temporary files a crash left behind; how many."""
        removed = 0
        if self.root.is_dir():
            for tmp in self.root.glob(f"*/{_TMP_PREFIX}*"):
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
                    removed += 1
        return removed
