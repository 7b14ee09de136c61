"""The console's client of the hospital's directory (python-ldap, on libldap): find a person,
check their password, and read again at each request whether they still may sign in and
with which role (the rules: console/directory_rules.py).

Every call blocks (the routes run it in a thread). The service account's connection is kept
and used under a lock; a server that went away is dialled again once, then
:class:`DirectoryUnavailable` is raised and the console refuses (it never guesses a role).
A password is checked on a connection of its own, closed at once, so the service
connection never runs as a person.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ldap
from ldap.filter import escape_filter_chars

from console.directory_rules import DirectoryConfig, role_of
from messages.replay import Role


class DirectoryUnavailable(Exception):
    """The directory did not answer, or not as expected: nobody is let in meanwhile."""


@dataclass(frozen=True, slots=True)
class Person:
    """A person as the directory sees them now."""

    name: str
    dn: str
    enabled: bool
    role: Role | None


class Directory:
    def __init__(self, config: DirectoryConfig) -> None:
        self.config = config
        self._password = ""
        if config.bind_password_file:
            try:
                self._password = Path(config.bind_password_file).read_text().strip()
            except OSError as exc:
                raise DirectoryUnavailable(
                    f"LEA_CONSOLE_LDAP_BIND_PASSWORD_FILE={config.bind_password_file}: "
                    f"{exc.strerror or exc}") from None
        self._lock = threading.Lock()
        self._conn: Any = None

    def _connect(self) -> Any:
        config = self.config
        conn = ldap.initialize(config.url)
        conn.set_option(ldap.OPT_PROTOCOL_VERSION, 3)
        conn.set_option(ldap.OPT_REFERRALS, 0)
        conn.set_option(ldap.OPT_NETWORK_TIMEOUT, config.timeout_s)
        conn.set_option(ldap.OPT_TIMEOUT, config.timeout_s)
        if config.ca_file:
            conn.set_option(ldap.OPT_X_TLS_CACERTFILE, config.ca_file)
            conn.set_option(ldap.OPT_X_TLS_REQUIRE_CERT, ldap.OPT_X_TLS_DEMAND)
            conn.set_option(ldap.OPT_X_TLS_NEWCTX, 0)
        if config.start_tls:
            conn.start_tls_s()
        return conn

    def _service(self) -> Any:
        if self._conn is None:
            conn = self._connect()
            conn.simple_bind_s(self.config.bind_dn, self._password)
            self._conn = conn
        return self._conn

    def _search(self, base: str, scope: int, filterstr: str,
                attrs: list[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Entries found with the service account (none if ``base`` does not exist)."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    found = self._service().search_st(base, scope, filterstr, attrs or ["1.1"],
                                                      timeout=self.config.timeout_s)
                    return [(dn, entry) for dn, entry in found if dn]
                except ldap.NO_SUCH_OBJECT:
                    return []
                except (ldap.SERVER_DOWN, ldap.CONNECT_ERROR, ldap.TIMEOUT) as exc:
                    self._drop()
                    if attempt == 2:
                        raise DirectoryUnavailable(_why(exc)) from None
                except ldap.LDAPError as exc:
                    self._drop()
                    raise DirectoryUnavailable(_why(exc)) from None
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.unbind_s()
            except ldap.LDAPError:
                pass
            self._conn = None

    def find(self, name: str) -> Person | None:
        """The person whose name is ``name`` (None when nobody, or several: a name that
        designates more than one person lets nobody in)."""
        filterstr = self.config.user_filter.replace("{name}", escape_filter_chars(name))
        found = self._search(self.config.user_base, ldap.SCOPE_SUBTREE, filterstr)
        if len(found) != 1:
            return None
        return self._describe(name, found[0][0])

    def person(self, name: str, dn: str) -> Person | None:
        """``dn`` now: None when it is gone, else whether it is enabled and its role."""
        if not self._search(dn, ldap.SCOPE_BASE, "(objectClass=*)"):
            return None
        return self._describe(name, dn)

    def _describe(self, name: str, dn: str) -> Person:
        config = self.config
        enabled = bool(self._search(dn, ldap.SCOPE_BASE, config.enabled_filter))
        member = config.member_filter.replace("{dn}", escape_filter_chars(dn))
        groups = {group for _role, group in config.groups
                  if self._search(group, ldap.SCOPE_BASE, member)}
        return Person(name=name, dn=dn, enabled=enabled, role=role_of(groups, config))

    def password_matches(self, dn: str, password: str) -> bool:
        """Whether ``password`` is ``dn``'s: a bind as that person. An empty password is
        never tried: LDAP takes it for an anonymous bind, which succeeds."""
        if not password:
            return False
        try:
            conn = self._connect()
        except ldap.LDAPError as exc:
            raise DirectoryUnavailable(_why(exc)) from None
        try:
            conn.simple_bind_s(dn, password)
            return True
        except (ldap.INVALID_CREDENTIALS, ldap.UNWILLING_TO_PERFORM,
                ldap.INAPPROPRIATE_AUTH, ldap.CONSTRAINT_VIOLATION):
            return False
        except ldap.LDAPError as exc:
            raise DirectoryUnavailable(_why(exc)) from None
        finally:
            try:
                conn.unbind_s()
            except ldap.LDAPError:
                pass

    def close(self) -> None:
        with self._lock:
            self._drop()


def _why(exc: BaseException) -> str:
    """A libldap error's description (python-ldap passes a dict as its argument)."""
    detail = exc.args[0] if exc.args else {}
    if isinstance(detail, dict):
        return str(detail.get("desc", "")) + (f": {detail['info']}" if detail.get("info")
                                             else "")
    return str(exc)
