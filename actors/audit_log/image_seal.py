"""How a screenshot is stored encrypted (pure): AES-256-GCM, one random nonce per image.

A stored image is ``MAGIC || len(key_id) || key_id || nonce || ciphertext+tag``. The key id
names the key of the keyring (image_keys.py) it was sealed with, so keys rotate without
rewriting what is stored: an image is always opened with the key it names. The associated
data is the magic, the key id and the image's name (the sha256 of its plaintext): a stored
image moved under another name, or its key id edited, no longer opens.

An image with no magic was stored before encryption (in clear); it is read as it is, and
``audit verify`` counts such images (docs/operations.md, "Screenshots encrypted at rest").
"""

from __future__ import annotations

from collections.abc import Mapping

MAGIC = b"LEAi1"
NONCE_BYTES = 12
KEY_BYTES = 32
OVERHEAD_TAG = 16


class KeyUnavailable(Exception):
    """No key to seal or open with (the keyring is missing or unreadable, or lacks the key
    an image names); ``code`` is the stable error code."""

    code = "image_key_unavailable"


class ImageUndecryptable(Exception):
    """The stored bytes do not open with the key they name: changed, or a key that is not
    the one they were sealed with."""


def sealed_size(key_id: str, plain_size: int) -> int:
    return len(MAGIC) + 1 + len(key_id.encode()) + NONCE_BYTES + plain_size + OVERHEAD_TAG


def _aad(key_id: bytes, digest: str) -> bytes:
    return MAGIC + key_id + digest.encode()


def seal(key_id: str, key: bytes, digest: str, image: bytes, nonce: bytes) -> bytes:
    """``image`` (whose sha256 is ``digest``) encrypted under ``key``, named ``key_id``."""
    kid = key_id.encode()
    if not 0 < len(kid) < 256:
        raise ValueError(f"key id {key_id!r}: 1 to 255 bytes")
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # imported here: see open_sealed

    body = AESGCM(key).encrypt(nonce, image, _aad(kid, digest))
    return b"".join((MAGIC, bytes([len(kid)]), kid, nonce, body))


def key_id_of(blob: bytes) -> str | None:
    """The key id a stored image names, or None if it is stored in clear."""
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 1:
        return None
    size = blob[len(MAGIC)]
    return blob[len(MAGIC) + 1:len(MAGIC) + 1 + size].decode("ascii", errors="replace")


def open_sealed(keys: Mapping[str, bytes], digest: str, blob: bytes) -> bytes:
    """The plaintext of a stored image; KeyUnavailable if its key is not in ``keys``,
    ImageUndecryptable if it does not open."""
    key_id = key_id_of(blob)
    if key_id is None:
        return blob  # stored in clear, before encryption
    key = keys.get(key_id)
    if key is None:
        raise KeyUnavailable(f"the image {digest[:16]}… was sealed with key {key_id!r}, "
                             "which the keyring does not hold")
    start = len(MAGIC) + 1 + len(key_id.encode())
    nonce, body = blob[start:start + NONCE_BYTES], blob[start + NONCE_BYTES:]
    # Imported where used: run.py builds every command's parser, and the Windows agent's
    # folder (python -m cli.bundle) runs it without `cryptography`, which only servers need.
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        return AESGCM(key).decrypt(nonce, body, _aad(key_id.encode(), digest))
    except (InvalidTag, ValueError):
        raise ImageUndecryptable(f"the image {digest[:16]}… does not open with key "
                                 f"{key_id!r}") from None
