"""CURVE key files (``python run.py keys generate``), read by the broker and by agents.

Layout of a keys directory::

    server.key           the broker's public key: every agent needs it (--server-key)
    server.key_secret    the broker's secret key: stays on the server
    allowed/<M>.key      the allow-list: one agent public key per file; <M> names the agent
                         (it becomes the connection's ZMQ User-Id)
    agents/<M>.key       agent M's public key: copy it into allowed/ to let M in
    agents/<M>.key_secret  agent M's secret key: for that workstation only (--agent-key)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.utils import z85

KEY_PREFIX = 8  # z85 characters of a key shown in logs and events


class CurveConfigError(ValueError):
    """A key file or directory that cannot be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """Where the files of a keys directory are (module docstring)."""

    root: Path

    @property
    def server_public(self) -> Path:
        return self.root / "server.key"

    @property
    def server_secret(self) -> Path:
        return self.root / "server.key_secret"

    @property
    def allowed(self) -> Path:
        return self.root / "allowed"

    def agent_public(self, name: str) -> Path:
        return self.root / "agents" / f"{name}.key"

    def agent_secret(self, name: str) -> Path:
        return self.root / "agents" / f"{name}.key_secret"


def _z85_key(value: bytes | None, path: Path, what: str) -> bytes:
    if value is None:
        raise CurveConfigError(f"{path}: no {what} (is it the right file?)")
    try:
        if len(value) == 40 and len(z85.decode(value)) == 32:
            return value
    except (ValueError, KeyError, IndexError):
        pass
    raise CurveConfigError(f"{path}: the {what} is not a 40-character Z85 CURVE key")


def read_key_file(path: Path, secret: bool = False) -> tuple[bytes, bytes | None]:
    """The Z85 (public, secret) keys of a certificate file; ``secret``: the secret is needed."""
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except OSError as exc:
        raise CurveConfigError(f"cannot read the key file {path}: {exc}") from exc
    except ValueError as exc:
        raise CurveConfigError(f"{path}: {exc}") from exc
    public = _z85_key(public, path, "public key")
    if secret:
        return public, _z85_key(secret_key, path, "secret key (a *.key_secret file)")
    return public, None


def key_prefix(public_z85: bytes) -> str:
    """The first characters of a key: enough to match logs of both sides, short to read."""
    return public_z85[:KEY_PREFIX].decode("ascii", "replace")


