"""Operator accounts of the console: who may do what, how a password is checked, when a
sign-in must wait. Pure decisions, except the password hashing (argon2id, argon2-cffi).

- Roles: ``viewer`` follows replays and work queues; ``operator`` also answers replays
  (resume, pause, cancel) and handles work items (adds a file, retries, skips); ``admin``
  also cancels work items and sees the accounts. The role is read again at every request, so a
  change or a disabled account applies at once.
- Passwords are stored as argon2id hashes (argon2-cffi's defaults, RFC 9106's second
  recommended setting); a hash made with older parameters is replaced at the next sign-in.
- Failed sign-ins are counted per account name and per client address over a window: past
  the limit, the next attempt waits until the oldest failure leaves the window, and the
  password is not even checked (docs/console.md, "Who is at the console").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final, Literal, get_args

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from messages.replay import Role

ROLES: Final = get_args(Role)
Act = Literal["read", "answer", "handle_items", "cancel_items", "administer"]
"""What a request does: read the replays and queues, answer a replay (resume / pause /
cancel), handle work items (add a file, retry, skip), cancel a work item, or see the
accounts (docs/queues.md, "At the console")."""
_ALLOWED: Final[dict[str, frozenset[Act]]] = {
    "viewer": frozenset({"read"}),
    "operator": frozenset({"read", "answer", "handle_items"}),
    "admin": frozenset({"read", "answer", "handle_items", "cancel_items", "administer"}),
}
ACT_WORDS: Final[dict[Act, str]] = {
    "read": "read",
    "answer": "answer a replay",
    "handle_items": "add, retry or skip work items",
    "cancel_items": "cancel a work item",
    "administer": "see the accounts",
}
"""What an act is called in a refusal's message."""
NAME_PATTERN: Final = re.compile(r"^[a-z][a-z0-9._-]{1,63}$")
MIN_PASSWORD_CHARS: Final = 12
MAX_PASSWORD_CHARS: Final = 1024

_HASHER: Final = PasswordHasher()


@functools.cache
def _dummy_hash() -> str:
    """Checked when the account name is unknown, so that the answer takes as long as for a
    known one (no way to tell the names apart by timing)."""
    return _HASHER.hash("no account has this password")


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    role: Role
    password_hash: str
    disabled: bool
    created_at: float


def may(role: str, act: Act) -> bool:
    """Whether an account of ``role`` may ``act``."""
    return act in _ALLOWED.get(role, frozenset())


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an account name, or None (lowercase letters, digits, ``._-``)."""
    if not NAME_PATTERN.match(name):
        return ("an account name is 2 to 64 characters: lowercase letters, digits, '.', '_' "
                "or '-', starting with a letter")
    return None


def password_problem(name: str, password: str) -> str | None:
    """Why ``password`` is refused for the account ``name``, or None."""
    if len(password) < MIN_PASSWORD_CHARS:
        return f"a password has at least {MIN_PASSWORD_CHARS} characters"
    if len(password) > MAX_PASSWORD_CHARS:
        return f"a password has at most {MAX_PASSWORD_CHARS} characters"
    if password.strip() != password:
        return "a password must not start or end with spaces"
    if name.lower() in password.lower():
        return "a password must not contain the account name"
    return None


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def password_matches(password_hash: str | None, password: str) -> bool:
    """Whether ``password`` is the one of ``password_hash`` (None: an unknown account,
    checked against a stand-in hash all the same, and never matching)."""
    try:
        ok = _HASHER.verify(password_hash or _dummy_hash(), password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
    return ok and password_hash is not None


def needs_rehash(password_hash: str) -> bool:
    try:
        return _HASHER.check_needs_rehash(password_hash)
    except InvalidHashError:
        return False


@dataclass(frozen=True, slots=True)
class Failures:
    """Failed sign-ins within the window: how many, and when the oldest was."""

    count: int
    oldest: float | None


def wait_before_login(account: Failures, address: Failures, now: float, window_s: float,
                      max_per_account: int, max_per_address: int) -> tuple[str, float] | None:
    """None when a sign-in may be tried now; else which limit (``account`` / ``address``)
    and how many seconds until it may."""
    for scope, seen, limit in (("account", account, max_per_account),
                               ("address", address, max_per_address)):
        if seen.count >= limit and seen.oldest is not None:
            return scope, max(1.0, seen.oldest + window_s - now)
    return None


class OncePer:
    """Remembers keys for a while: :meth:`first` is True once per key per period (a limit
    reached is recorded once per window, not at every refused attempt)."""

    def __init__(self, max_keys: int = 10_000) -> None:
        self._until: dict[str, float] = {}
        self._max = max_keys

    def first(self, key: str, now: float, period_s: float) -> bool:
        if self._until.get(key, 0.0) > now:
            return False
        if len(self._until) >= self._max:
            self._until = {k: t for k, t in self._until.items() if t > now}
        self._until[key] = now + period_s
        return True
