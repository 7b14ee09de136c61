"""Signing in, and who a session is at each request: a local account (console/accounts.py)
or a person of the hospital's directory (console/directory.py).

- :func:`sign_in`: the limits on failed sign-ins first (per account name and per client
  address), the attempt counted before its password is checked; then the local account of
  that name if there is one (a server keeps one for when the directory is down), else the
  directory. Every outcome is an audit record (source ``console``).
- :func:`session_person`: the session of a cookie now, and its role. A directory person's
  entry, enabled state and groups are read again at every request (no cache: a person
  removed from the operators' group answers nothing more from the next request on); one
  the directory no longer lets in has their session ended, recorded. A directory that does
  not answer lets nobody of it in (503), and ends nobody's session.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass
from typing import Any

from console import access
from console.account_store import Session, session_hash
from console.accounts import (
    Account,
    hash_password,
    needs_rehash,
    password_matches,
    wait_before_login,
)
from console.directory import DirectoryUnavailable, Person
from console.state import ApiProblem, ConsoleState
from messages.replay import Role


@dataclass(frozen=True, slots=True)
class SignedIn:
    cookie: str
    account: str
    role: Role
    expires_at: float


async def _blocking(func: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, func, *args)


def _unavailable(console: ConsoleState, now: float, data: dict[str, Any],
                 exc: DirectoryUnavailable) -> ApiProblem:
    console.accounts.record("directory_unavailable", now, {**data, "problem": str(exc)})
    console.audit.wake()
    return ApiProblem(503, "directory_unavailable",
                      "the hospital's directory does not answer: try again in a moment")


async def sign_in(console: ConsoleState, typed_name: str, password: str,
                  client: str) -> SignedIn:
    """A new session for ``typed_name`` with ``password``, or an ApiProblem saying why not."""
    settings = console.settings
    name, now = typed_name.strip().lower(), time.time()
    scopes = [f"account:{name}", f"address:{client}"]
    since = now - settings.console_login_window_s
    failures = [console.accounts.failures(scope, since) for scope in scopes]
    wait = wait_before_login(
        failures[0], failures[1], now, settings.console_login_window_s,
        settings.console_login_max_failures, settings.console_login_max_failures_per_address)
    account = console.accounts.get(name)
    if wait is not None:
        scope, seconds = wait
        key = scopes[0] if scope == "account" else scopes[1]
        if console.limits.first(key, now, settings.console_login_window_s):
            console.accounts.record("login_rate_limited", now, {
                "limit": scope, "client": client, "retry_after_s": round(seconds),
                **({"account": name} if account else {"account_known": False})})
            console.audit.wake()
        whose = "of this account" if scope == "account" else "from this address"
        raise ApiProblem(429, "login_rate_limited", f"too many failed sign-ins {whose}: try "
                         f"again in {round(seconds)} s", {"retry_after_s": round(seconds),
                                                          "limit": scope},
                         {"Retry-After": str(round(seconds))})
    # Counted before the (slow) check, in the same turn of the loop as the limit: attempts
    # sent together are refused past the limit, not all checked at once.
    attempt = console.accounts.attempt(scopes, now, settings.console_login_window_s)

    def failed(known: bool, **extra: Any) -> ApiProblem:
        # An unknown name is not written to the trail: it is often a password typed in
        # the wrong field, and the trail keeps everything for good.
        console.accounts.record("login_failed", now, {
            "client": client, "reason": "bad_password" if known else "unknown_account",
            **({"account": name} if known else {"account_known": False}),
            "failures_in_window": failures[0].count + 1, **extra})
        console.audit.wake()
        return ApiProblem(401, "login_failed", "wrong account name or password")

    def refused(reason: str, problem: ApiProblem, **extra: Any) -> ApiProblem:
        console.accounts.record("login_refused", now, {
            "account": name, "client": client, "reason": reason, **extra})
        console.audit.wake()
        return problem

    directory = console.directory
    dn: str | None = None
    if account is None and directory is not None:
        try:
            person: Person | None = await _blocking(directory.find, name)
            ok = person is not None and await _blocking(directory.password_matches,
                                                       person.dn, password)
        except DirectoryUnavailable as exc:
            raise _unavailable(console, now, {"account": name, "client": client},
                               exc) from None
        if person is None:
            raise failed(False)
        where = {"origin": "directory", "dn": person.dn}
        if not ok:
            raise failed(True, **where)
        if not person.enabled:
            raise refused("account_disabled", ApiProblem(
                403, "account_disabled", "this account is disabled"), **where)
        if person.role is None:
            raise refused("no_group", _no_role(), **where)
        account, dn = Account(name=name, role=person.role, password_hash="", disabled=False,
                              created_at=now), person.dn
    else:
        ok = await _blocking(password_matches,
                             account.password_hash if account else None, password)
        if not ok or account is None:
            raise failed(account is not None)
        if account.disabled:
            raise refused("account_disabled", ApiProblem(
                403, "account_disabled", "this account is disabled"))
        if needs_rehash(account.password_hash):
            console.accounts.rehash(name, await _blocking(hash_password, password), now)
    value = secrets.token_urlsafe(32)
    expires_at = now + settings.console_session_lifetime_s
    console.accounts.open_session(session_hash(value), account, client, now, expires_at,
                                  scopes[0], attempt, dn)
    console.audit.wake()
    return SignedIn(cookie=value, account=account.name, role=account.role,
                    expires_at=expires_at)


def _no_role() -> ApiProblem:
    return ApiProblem(403, "no_role", "this account is in none of the directory groups that "
                                      "give access to the console")


async def session_person(console: ConsoleState,
                         id_hash: str) -> tuple[Session, Role] | access.Denied:
    """The session ``id_hash`` now, with its role; or why it may not be used."""
    now = time.time()
    session = console.accounts.session(id_hash, now)
    if session.state != "valid" or session.account is None:
        if session.state == "expired":
            console.audit.wake()
        return access.person_denied(session.state)
    if session.directory_dn is None:
        return session, session.account.role
    directory, name = console.directory, session.account.name
    data = {"account": name, "dn": session.directory_dn}
    if directory is None:  # the directory was switched off since the sign-in
        person = None
    else:
        try:
            person = await _blocking(directory.person, name, session.directory_dn)
        except DirectoryUnavailable as exc:
            problem = _unavailable(console, now, data, exc)
            return access.Denied(problem.status, problem.code, problem.message)
    if person is not None and person.enabled and person.role is not None:
        return session, person.role
    why = ("removed_from_directory" if person is None else
           "account_disabled" if not person.enabled else "no_group")
    console.accounts.end_directory_session(id_hash, now, why, data)
    console.audit.wake()
    if why == "account_disabled":
        return access.person_denied("account_disabled")
    if why == "no_group":
        problem = _no_role()
        return access.Denied(problem.status, problem.code, problem.message)
    return access.person_denied("ended")
