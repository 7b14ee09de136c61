"""The screenshots' seal (AES-GCM, the key id and the image's name bound to it) and keyring
(0600, rotation keeps the old keys, a wrong or open keyring refused)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from actors.audit_log.image_keys import (
    ImageCipher,
    read_keyring,
    rotate,
    with_new_key,
    write_keyring,
)
from actors.audit_log.image_seal import (
    ImageUndecryptable,
    KeyUnavailable,
    key_id_of,
    open_sealed,
    seal,
    sealed_size,
)

IMAGE = b"\x89PNG a patient's record" * 40
DIGEST = hashlib.sha256(IMAGE).hexdigest()
KEY = bytes(range(32))


def test_a_sealed_image_opens_with_its_key_only_under_its_name() -> None:
    blob = seal("k1", KEY, DIGEST, IMAGE, b"\x01" * 12)
    assert IMAGE[:40] not in blob and len(blob) == sealed_size("k1", len(IMAGE))
    assert key_id_of(blob) == "k1" and open_sealed({"k1": KEY}, DIGEST, blob) == IMAGE
    with pytest.raises(KeyUnavailable):
        open_sealed({"k2": KEY}, DIGEST, blob)
    with pytest.raises(ImageUndecryptable):  # another key under that id
        open_sealed({"k1": bytes(32)}, DIGEST, blob)
    with pytest.raises(ImageUndecryptable):  # moved under another image's name
        open_sealed({"k1": KEY}, "0" * 64, blob)
    flipped = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(ImageUndecryptable):
        open_sealed({"k1": KEY}, DIGEST, flipped)
    assert open_sealed({}, DIGEST, IMAGE) == IMAGE  # stored in clear before encryption


def test_the_keyring_is_0600_and_a_rotation_keeps_the_old_keys(tmp_path: Path) -> None:
    path = tmp_path / "k" / "image-keys.json"
    cipher = ImageCipher(path)
    cipher.load(create=True, now=1_800_000_000.0)
    assert cipher.problem is None and path.stat().st_mode & 0o777 == 0o600
    old = cipher.seal(DIGEST, IMAGE)
    first = cipher.current
    ring = rotate(path, 1_800_086_400.0)
    assert ring.current != first and set(ring.keys) == {first, ring.current}
    assert path.stat().st_mode & 0o777 == 0o600
    assert cipher.refresh() and cipher.current == ring.current
    assert key_id_of(cipher.seal(DIGEST, IMAGE)) == ring.current
    assert cipher.open(DIGEST, old) == IMAGE


def test_a_keyring_missing_open_to_others_or_lacking_a_used_key_is_not_used(
        tmp_path: Path) -> None:
    path = tmp_path / "image-keys.json"
    cipher = ImageCipher(path)
    cipher.load()
    assert cipher.problem is not None and "no image keyring" in cipher.problem
    with pytest.raises(KeyUnavailable):
        cipher.seal(DIGEST, IMAGE)
    write_keyring(path, with_new_key(None, 1_800_000_000.0))
    os.chmod(path, 0o644)
    cipher.load()
    assert cipher.problem is not None and "chmod 600" in cipher.problem
    os.chmod(path, 0o600)
    cipher.required = {"20200101-deadbeef"}  # a key this trail used, from another keyring
    cipher.load()
    assert cipher.problem is not None and "20200101-deadbeef" in cipher.problem
    path.write_text("{not json")
    with pytest.raises(KeyUnavailable, match="not a keyring"):
        read_keyring(path)
    with pytest.raises(KeyUnavailable):  # a rotation never starts over a broken keyring
        rotate(path, 1_800_000_000.0)
