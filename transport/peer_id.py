"""Who sent a request: the authenticated identity the broker writes into a client address.

RFC 18 lets the broker give a worker any client address, which the worker treats as opaque
and sends back with its reply. Ours carries the sender's CURVE identity (its ZAP User-Id,
the name of its allow-list file, broker/curve_listener.py) when it has one:

- a peer of the CURVE listener: ``b"id:" + user_id + b"\\x00" + token``;
- a peer of the plain (loopback) endpoint: ``token``, which never starts with ``b"id:"``;
- a peer of the tree's own door: User-Id :data:`TREE_USER_ID`; of the people's door:
  ``@os:<uid>`` (:func:`person_user_id`), the uid the kernel gave for the connection
  (broker/tree_door.py, broker/control_door.py). Allow-list names never start with ``@``.

``token`` is the client's routing id when the broker has no CURVE listener (escaped as
``b"id:\\x00" + routing_id`` if it starts with ``b"id:"``: a peer may choose its own, and
no local peer may pass for an authenticated one), and a keyed hash of it when it has one
(broker/majordomo.py says why). The broker keeps the routing id with the request.

A User-Id never contains a NUL byte (it is a file name), so the first NUL ends it. A worker
that ignores all this still works: it sends the address back unchanged, as the RFC says.
"""

from __future__ import annotations

from typing import Final

TAG: Final = b"id:"
TREE_USER_ID: Final = "@tree"
"""The tree's own processes (its door admits only the tree's uid)."""
PERSON_PREFIX: Final = "@os:"


def person_user_id(uid: int) -> str:
    """The User-Id of a connection to the people's door from OS account ``uid``."""
    return f"{PERSON_PREFIX}{uid}"


def person_uid(identity: str | None) -> int | None:
    """The OS uid in an identity of the people's door, or None for any other caller."""
    if identity is None or not identity.startswith(PERSON_PREFIX):
        return None
    digits = identity[len(PERSON_PREFIX):]
    return int(digits) if digits.isdigit() else None


def is_agent(identity: str | None) -> bool:
    """An identity from the CURVE allow-list (an agent), not the tree nor a person."""
    return identity is not None and not identity.startswith("@")


def client_address(routing_id: bytes, user_id: str | None) -> bytes:
    """The address a worker is given for a client (``user_id`` None: a plain peer)."""
    if user_id:
        return TAG + user_id.encode() + b"\x00" + routing_id
    if routing_id.startswith(TAG):
        return TAG + b"\x00" + routing_id
    return routing_id


def identity_of(address: bytes) -> str | None:
    """The authenticated identity in a client address, or None for a plain (local) peer."""
    if not address.startswith(TAG):
        return None
    end = address.find(b"\x00", len(TAG))
    if end <= len(TAG):  # no NUL (not written by the broker), or the escape of a local peer
        return None
    return address[len(TAG):end].decode("utf-8", "replace")
