"""The tree's own door: the only place the actors' services may be served from
(docs/protocol.md).

An agent must never pass for an actor: a peer that served ``dispatcher`` or ``audit_log``
would receive agents' reports and audit batches (patient screenshots) and could acknowledge
records it never stored. So the broker's ROUTER gets a third listener, ``tree_endpoint``: an
``ipc://`` socket in a directory made owner-only (0700) by the broker, which only processes
of the tree's own OS user can reach. It asks ZAP (RFC 27, domain :data:`TREE_DOMAIN`) about
every connection; the handler checks the peer's uid (libzmq passes SO_PEERCRED as the ZAP
address, ``host:uid:gid:pid``) and gives it the User-Id :data:`TREE_USER_ID`, which no
allow-list file can give (agent names start with a letter or digit). The broker then accepts
a READY for a service of :data:`TREE_SERVICES` only from a connection carrying that User-Id
(broker/majordomo.py); the plain loopback endpoint, the CURVE listener and whatever an SSH
tunnel reaches cannot serve them.

Why an ipc socket rather than a key per actor: no secret to create, copy or rotate; the
kernel says who connects; and a loopback TCP port is open to every account of the server.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

import zmq

from broker.zap import Verdict
from transport.peer_id import TREE_USER_ID

__all__ = ["TREE_DOMAIN", "TREE_SERVICES", "TREE_USER_ID", "TreeDoorError", "admits", "bind",
           "ipc_path", "judge", "peer_uid", "private_dir"]

TREE_DOMAIN: Final = b"lea-tree"
TREE_SERVICES: Final = frozenset({
    b"dispatcher", b"watchdog", b"loop_detector", b"safety_checks", b"monitor_router",
    b"audit_log", b"console"})
"""The actors' services (actors.ACTORS, and the console's name): the tree's alone."""

IPC_PATH_MAX = 107  # sun_path of a Unix socket, less its terminating NUL


class TreeDoorError(ValueError):
    """The tree's door cannot be opened as configured; the message says why."""


def ipc_path(endpoint: str) -> Path:
    """The socket file of an ``ipc://`` endpoint; raises TreeDoorError for anything else."""
    if not endpoint.startswith("ipc://") or len(endpoint) == len("ipc://"):
        raise TreeDoorError(f"tree_endpoint {endpoint!r}: must be ipc://PATH")
    path = Path(endpoint.removeprefix("ipc://"))
    if len(os.fsencode(path)) > IPC_PATH_MAX:
        raise TreeDoorError(f"tree_endpoint {endpoint!r}: the path is longer than "
                            f"{IPC_PATH_MAX} bytes (set LEA_TREE_ENDPOINT to a shorter one)")
    return path


def private_dir(path: Path) -> None:
    """Make ``path`` (the socket's directory) exist, owned by us, mode 0700."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
        if info.st_uid != os.getuid():
            raise TreeDoorError(f"{path} belongs to uid {info.st_uid}, not to this user: "
                                "the tree's door must be in a directory of its own")
        if stat.S_IMODE(info.st_mode) != 0o700:
            path.chmod(0o700)
    except OSError as exc:
        raise TreeDoorError(f"cannot prepare {path} for the tree's door: {exc}") from exc


def peer_uid(address: bytes) -> int | None:
    """The uid in a ZAP address of an ipc peer (``host:uid:gid:pid``), or None."""
    parts = address.split(b":")
    if len(parts) < 4 or not parts[-3].isdigit():
        return None
    return int(parts[-3])


def admits(address: bytes, uid: int | None = None) -> str | None:
    """None if the peer at ``address`` may use the tree's door, else why not."""
    found = peer_uid(address)
    if found is None:
        return "the peer's credentials are unknown"
    mine = os.getuid() if uid is None else uid
    if found != mine:
        return f"uid {found} is not the tree's user (uid {mine})"
    return None


def judge(request: list[bytes]) -> Verdict:
    """The ZAP verdict on a connection to the tree's door (broker/zap.py)."""
    if request[5] != b"NULL":
        return Verdict(b"400", f"mechanism {request[5]!r} is not the tree's")
    why = admits(request[3])
    return Verdict(b"400", why) if why else Verdict(b"200", "OK", user_id=TREE_USER_ID)


def bind(router: zmq.Socket[bytes], endpoint: str) -> None:
    """Bind the tree's door on ``router``, after the ZAP server (broker/zap.py): only its
    verdict gives a connection the tree's User-Id. The domain stays set (libzmq refuses an
    empty one): a later bind sets its own."""
    path = ipc_path(endpoint)
    private_dir(path.parent)
    router.setsockopt(zmq.ZAP_DOMAIN, TREE_DOMAIN)
    router.bind(endpoint)
