"""The people's door: where the commands that change or delete reach the broker, with the
caller's OS account proven by the kernel (docs/architecture.md, "Who may do what").

The plain loopback endpoint is a TCP port: every account of the server can reach it, and
nothing tells the broker who is calling. This door is an ``ipc://`` socket that every local
account may reach (its directory 0711, the socket 0666), and whose every connection the broker
checks through ZAP (RFC 27, domain :data:`CONTROL_DOMAIN`): libzmq passes the peer's
SO_PEERCRED as the ZAP address (``host:uid:gid:pid``), and the handler gives the connection
the User-Id ``@os:<uid>`` (:func:`transport.peer_id.person_user_id`), which no allow-list file
can give (agent names start with a letter or digit). Workers see it in the client address;
the actors decide what that account may do (actors/base.py: only the tree's user and the
members of ``control_group`` may start, pause, resume, cancel or prune).

Why any account may connect rather than only the group: a refused person gets a clear answer
naming the group, and the refusal is recorded with their account in the audit trail; a
socket they could not open would only leave their command waiting, and say nothing to anyone.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

import zmq

from broker.tree_door import TreeDoorError, ipc_path, peer_uid
from broker.zap import Verdict
from transport.peer_id import person_user_id

CONTROL_DOMAIN: Final = b"lea-control"
DIR_MODE: Final = 0o711  # others may reach the socket by its name, not list the folder
SOCKET_MODE: Final = 0o666  # connecting to a Unix socket needs write permission on it


def judge(request: list[bytes]) -> Verdict:
    """The ZAP verdict on a connection to the people's door (broker/zap.py)."""
    if request[5] != b"NULL":
        return Verdict(b"400", f"mechanism {request[5]!r} is not the people's door's")
    uid = peer_uid(request[3])
    if uid is None:
        return Verdict(b"400", "the peer's credentials are unknown")
    return Verdict(b"200", "OK", user_id=person_user_id(uid))


def open_dir(path: Path) -> None:
    """Make ``path`` (the socket's directory) exist, owned by us, mode 0711: a folder another
    account made first (in a shared temporary directory) is refused, not used."""
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        info = path.stat()
        if info.st_uid != os.getuid():
            raise TreeDoorError(f"{path} belongs to uid {info.st_uid}, not to this user: "
                                "the people's door must be in a directory of its own "
                                "(set LEA_CONTROL_ENDPOINT)")
        if stat.S_IMODE(info.st_mode) != DIR_MODE:
            path.chmod(DIR_MODE)
    except OSError as exc:
        raise TreeDoorError(f"cannot prepare {path} for the people's door: {exc}") from exc


def bind(router: zmq.Socket[bytes], endpoint: str) -> None:
    """Bind the people's door on ``router``, after the ZAP server (broker/zap.py)."""
    path = ipc_path(endpoint)
    open_dir(path.parent)
    router.setsockopt(zmq.ZAP_DOMAIN, CONTROL_DOMAIN)
    router.bind(endpoint)
    try:
        path.chmod(SOCKET_MODE)
    except OSError as exc:
        raise TreeDoorError(f"cannot open {path} to the server's accounts: {exc}") from exc
