"""CURVE for agents (docs/protocol.md): the broker's listener, the allow-list, and its ZAP judge
(the key files are read by :mod:`transport.curve_keys`).

The broker's one ROUTER gets another listener, ``curve_endpoint``, that is a CURVE server,
for agents outside and for agents through an SSH tunnel alike; the loopback
``mdp_endpoint`` stays plain for local commands. libzmq takes a socket's security options
when it binds (docs/protocol.md), so binding the plain endpoint first and the CURVE one
after the options are set gives one MDP state with several doors. A NULL connection with no
ZAP domain never reaches ZAP (measured with libzmq 4.3.5).

ZAP (RFC 27) is answered by the broker's own loop (broker/zap.py), where the broker can
publish ``lea:peer_refused``. An allow-list file whose name starts with ``@`` is skipped: such
User-Ids are the broker's own (broker/tree_door.py). The allow-list is read again whenever
a file in its directory changes, so a key added or removed counts at the next handshake,
without a restart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from loguru import logger
from zmq.utils import z85

from broker.zap import Verdict
from messages.events import PEER_REFUSED
from runtime.rate_limit import RateLimit
from transport.curve_keys import CurveConfigError, KeyLayout, key_prefix, read_key_file

ZAP_DOMAIN = b"lea"


class AllowList:
    """The agent public keys of the ``*.key`` files of ``directory``, re-read when it changes.

    ``refresh`` costs one directory scan; it reloads only when a file's name, size or mtime
    changed. A file that cannot be used is skipped and named in ``problems``.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._signature: tuple[tuple[str, int, int], ...] | None = None
        self._keys: dict[bytes, str] = {}  # raw 32-byte public key -> agent name
        self.problems: list[str] = []

    def _scan(self) -> tuple[tuple[str, int, int], ...]:
        try:
            entries = [(e.name, e.stat()) for e in os.scandir(self.directory)
                       if e.name.endswith(".key") and e.is_file()]
        except OSError:
            return ()
        return tuple(sorted((name, st.st_mtime_ns, st.st_size) for name, st in entries))

    def refresh(self) -> bool:
        """Re-read the directory if it changed; True if it did."""
        signature = self._scan()
        if signature == self._signature:
            return False
        self._signature = signature
        keys: dict[bytes, str] = {}
        problems: list[str] = []
        for name, _mtime, _size in signature:
            try:
                public, _ = read_key_file(self.directory / name)
            except CurveConfigError as exc:
                problems.append(str(exc))
                continue
            agent = name.removesuffix(".key")
            if not agent or agent.startswith("@"):
                # It becomes the User-Id: an empty one would name nobody, and '@' ones are
                # the broker's (the tree's door): no key may pass for the tree.
                problems.append(f"{self.directory / name}: the file name must name the agent")
                continue
            keys[z85.decode(public)] = agent
        self._keys, self.problems = keys, problems
        return True

    def lookup(self, public_key: bytes) -> str | None:
        """The agent name of a raw 32-byte public key, or None if it is not allowed."""
        return self._keys.get(public_key)

    def __len__(self) -> int:
        return len(self._keys)


def decide(frames: list[bytes], allow: AllowList) -> Verdict:
    """The verdict on one ZAP request (``frames`` after the routing id and empty frame),
    against ``allow`` as it is (the caller refreshes it)."""
    if len(frames) < 6 or frames[0] != b"1.0":
        return Verdict(b"500", "malformed ZAP request")
    domain, mechanism, credentials = frames[2], frames[5], frames[6:]
    if mechanism != b"CURVE" or domain != ZAP_DOMAIN:
        # Only the CURVE listener asks; anything else is refused rather than let through.
        return Verdict(b"400", f"mechanism {mechanism!r} in domain {domain!r} is not served")
    if len(credentials) != 1 or len(credentials[0]) != 32:
        return Verdict(b"500", "CURVE credentials are not one 32-byte key")
    public = z85.encode(credentials[0])
    name = allow.lookup(credentials[0])
    if name is None:
        return Verdict(b"400", "key not in the allow-list", public_key=public)
    return Verdict(b"200", "OK", user_id=name, public_key=public)


Publish = Callable[[str, dict[str, Any]], None]


class CurveListener:
    """The CURVE door of the broker's ROUTER and its ZAP judge (broker/zap.py).

    Build it after the plain endpoint is bound and the ZAP server is: a CURVE listener
    without a ZAP handler lets every key in. Serve :meth:`judge` for :data:`ZAP_DOMAIN`.
    """

    def __init__(self, router: zmq.Socket[Any], keys_dir: Path, endpoint: str,
                 publish: Publish, plain_endpoint: str = "") -> None:
        layout = KeyLayout(keys_dir)
        public, secret = read_key_file(layout.server_secret, secret=True)
        assert secret is not None
        self.allow = AllowList(layout.allowed)
        self.publish = publish
        self.endpoint = endpoint
        self._log_limit = RateLimit(2.0)  # a refused agent retries; a hostile one floods
        router.setsockopt(zmq.CURVE_SERVER, 1)
        router.setsockopt(zmq.CURVE_SECRETKEY, secret)
        router.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        router.bind(endpoint)
        self.allow.refresh()
        if not self.allow.directory.is_dir():
            logger.warning("broker: the allow-list directory {} does not exist: every agent"
                           " key is refused until it does", self.allow.directory)
        self._log_problems()
        logger.info("broker: CURVE listener on {} (server key {}..., {} allowed key(s) in {})",
                    endpoint, key_prefix(public), len(self.allow), self.allow.directory)
        if plain_endpoint and not _loopback(plain_endpoint):
            logger.warning("broker: the plain MDP endpoint {} is not on loopback: peers can "
                           "come in there without CURVE", plain_endpoint)

    def _log_problems(self) -> None:
        for problem in self.allow.problems:
            logger.warning("broker: allow-list: skipped {}", problem)

    def judge(self, request: list[bytes]) -> Verdict:
        """The verdict on one ZAP request, against the allow-list as it is now."""
        if self.allow.refresh():  # one directory scan per handshake: they are rare
            logger.info("broker: allow-list re-read: {} key(s)", len(self.allow))
            self._log_problems()
        return decide(request, self.allow)

    def refused(self, request: list[bytes], verdict: Verdict) -> None:
        address = request[3].decode("utf-8", "replace") if len(request) > 3 else ""
        prefix = key_prefix(verdict.public_key) if verdict.public_key else ""
        if self._log_limit.allow(time.monotonic()):
            logger.warning("broker: refused a connection from {} on {}: {} (key {}...)",
                           address or "?", self.endpoint, verdict.text, prefix or "-")
        self.publish(PEER_REFUSED, {"socket": "mdp", "endpoint": self.endpoint,
                                    "peer": address, "key_prefix": prefix,
                                    "reason": verdict.text})


def _loopback(endpoint: str) -> bool:
    host = endpoint.removeprefix("tcp://").rsplit(":", 1)[0].strip("[]")
    return endpoint.startswith(("ipc://", "inproc://")) or host in ("localhost", "::1") or (
        host.startswith("127."))


def server_keys_problem(keys_dir: Path) -> str | None:
    """Why the broker could not start its CURVE listener with ``keys_dir``, or None."""
    try:
        read_key_file(KeyLayout(keys_dir).server_secret, secret=True)
    except CurveConfigError as exc:
        return f"{exc} (create the keys with: python run.py keys generate --dir {keys_dir})"
    return None
