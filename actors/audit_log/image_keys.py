"""The screenshots' keys: a keyring file outside the database and the data directory's images
(``LEA_IMAGE_KEYRING``), readable by the service's user only (docs/operations.md,
"Screenshots encrypted at rest").

The file is JSON: ``{"version": 1, "current": ID, "keys": {ID: {"key": BASE64,
"created_at": EPOCH}}}``. New images are sealed with the current key; every key stays to
open the images sealed with it (image_seal.py). ``audit keys rotate`` adds a key and makes it
current, replacing the file whole (written to a temporary name with mode 0600, fsync'ed,
renamed); the audit_log actor notices the new file within a second.

A keyring that is missing where images were sealed before, unreadable, malformed or open to
other users is not used: images are then neither stored nor served (the records that carry
them are refused and stay with their senders), and the actor says why (an event and its
log) until the file is put right. It is created only where no image was ever sealed.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import secrets
import stat
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from actors.audit_log.image_seal import (
    KEY_BYTES,
    NONCE_BYTES,
    KeyUnavailable,
    open_sealed,
    seal,
)
from runtime.durability import fsync_dir

VERSION = 1


@dataclass(frozen=True, slots=True)
class Keyring:
    current: str
    keys: dict[str, bytes]
    created_at: dict[str, float]


def new_key_id(now: float) -> str:
    """A key id a person can tell apart: its day and a random part."""
    day = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d")
    return f"{day}-{secrets.token_hex(4)}"


def parse(text: bytes) -> Keyring:
    """The keyring in ``text``; ValueError saying what is wrong."""
    try:
        raw = json.loads(text)
        if raw.get("version") != VERSION:
            raise ValueError(f"version {raw.get('version')!r}, expected {VERSION}")
        keys, created = {}, {}
        for key_id, entry in raw["keys"].items():
            key = base64.b64decode(entry["key"], validate=True)
            if len(key) != KEY_BYTES:
                raise ValueError(f"key {key_id!r} is not {KEY_BYTES} bytes")
            keys[str(key_id)], created[str(key_id)] = key, float(entry["created_at"])
        current = str(raw["current"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a keyring: {exc}") from None
    if current not in keys:
        raise ValueError(f"its current key {current!r} is not among its keys")
    return Keyring(current, keys, created)


def dump(ring: Keyring) -> bytes:
    return json.dumps({"version": VERSION, "current": ring.current, "keys": {
        k: {"key": base64.b64encode(v).decode(), "created_at": ring.created_at[k]}
        for k, v in ring.keys.items()}}, indent=1).encode()


def with_new_key(ring: Keyring | None, now: float) -> Keyring:
    """``ring`` with a new key, made current (the old ones kept)."""
    key_id = new_key_id(now)
    keys = dict(ring.keys) if ring else {}
    created = dict(ring.created_at) if ring else {}
    keys[key_id], created[key_id] = secrets.token_bytes(KEY_BYTES), now  # AES-256
    return Keyring(key_id, keys, created)


def read_keyring(path: Path) -> Keyring:
    """The keyring at ``path``; KeyUnavailable saying why it cannot be used."""
    try:
        st = path.stat()
        text = path.read_bytes()
    except FileNotFoundError:
        raise KeyUnavailable(f"no image keyring at {path}") from None
    except OSError as exc:
        raise KeyUnavailable(f"the image keyring {path} cannot be read: {exc}") from None
    if os.name == "posix" and stat.S_IMODE(st.st_mode) & 0o077:
        raise KeyUnavailable(f"the image keyring {path} is open to other users (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}): chmod 600 it")
    try:
        return parse(text)
    except ValueError as exc:
        raise KeyUnavailable(f"the image keyring {path}: {exc}") from None


def write_keyring(path: Path, ring: Keyring, *, exclusive: bool = False) -> None:
    """Replace the file whole, mode 0600 from its creation (never readable by others).
    ``exclusive``: only if there is none (FileExistsError: another process made it first;
    two audit_logs starting together on one keyring end up with the same)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, dump(ring))
        os.fsync(fd)
    finally:
        os.close(fd)
    if exclusive:
        try:
            os.link(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            # A filesystem without hard links (some network or FUSE mounts): create it
            # exclusively in place; a crash mid-write leaves a file the next start refuses.
            _create_exclusive(path, dump(ring))
        finally:
            tmp.unlink()
    else:
        os.replace(tmp, path)
    fsync_dir(path.parent)


def _create_exclusive(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def rotate(path: Path, now: float) -> Keyring:
    """Add a key to the keyring at ``path`` and make it current; KeyUnavailable if the
    keyring there cannot be used (a rotation never starts a new keyring over a broken one)."""
    ring = with_new_key(read_keyring(path), now)
    write_keyring(path, ring)
    return ring


class ImageCipher:
    """The keyring a store seals and opens images with, read again when its file changes."""

    def __init__(self, path: Path | None) -> None:
        """``path`` None: no keyring (images are neither sealed nor opened)."""
        self.path = path or Path("(no image keyring given)")
        self.ring: Keyring | None = None
        self.problem: str | None = "no image keyring given" if path is None else "not loaded"
        self.required: set[str] = set()
        """Key ids the trail has used (the store's ``image_keys``): a keyring without one
        of them is the wrong keyring."""
        self._seen: tuple[int, int, int] | None = None
        self._given = path is not None

    def load(self, create: bool = False, now: float | None = None) -> None:
        """Read the keyring (creating it if absent and ``create``); sets ``problem``."""
        if not self._given:
            return
        if create and not self.path.exists():
            try:
                write_keyring(self.path, with_new_key(None, now or time.time()),
                              exclusive=True)
            except FileExistsError:
                pass  # made meanwhile by another process: read below
            except OSError as exc:
                self.ring, self.problem = None, f"cannot create {self.path}: {exc}"
                return
        try:
            self._seen = self._stamp()
            ring = read_keyring(self.path)
        except KeyUnavailable as exc:
            self.ring, self.problem = None, str(exc)
            return
        lacking = sorted(self.required - set(ring.keys))
        if lacking:
            self.ring, self.problem = None, (
                f"the image keyring {self.path} lacks key(s) {', '.join(lacking)} that "
                "images of this trail were sealed with: is it the right one (the same file "
                "on every server of the trail)?")
            return
        self.ring, self.problem = ring, None

    def refresh(self) -> bool:
        """Read the file again if it changed (or went); whether it did."""
        if not self._given:
            return False
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self.load()
        return True

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    @property
    def current(self) -> str | None:
        return self.ring.current if self.ring else None

    def seal(self, digest: str, image: bytes) -> bytes:
        if self.ring is None:
            raise KeyUnavailable(self.problem or "no image keyring")
        return seal(self.ring.current, self.ring.keys[self.ring.current], digest, image,
                    secrets.token_bytes(NONCE_BYTES))

    def open(self, digest: str, blob: bytes) -> bytes:
        """The plaintext; KeyUnavailable / ImageUndecryptable (image_seal.py)."""
        keys = self.ring.keys if self.ring else {}
        try:
            return open_sealed(keys, digest, blob)
        except KeyUnavailable:
            if self.refresh():  # rotated meanwhile: the new file may hold it
                return open_sealed(self.ring.keys if self.ring else {}, digest, blob)
            if self.ring is None:
                raise KeyUnavailable(self.problem or "no image keyring") from None
            raise
