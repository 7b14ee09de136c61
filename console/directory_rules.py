"""Sign-in with the hospital's directory (LDAP, Active Directory): the settings and the pure
decisions; console/directory.py speaks to the server (docs/operations.md, "Sign-in with the
hospital's directory").

- A person is looked up with ``console_ldap_user_filter`` (``{name}`` is the name typed,
  escaped) under ``console_ldap_user_base``, by the console's own service account; the
  password is checked by binding as the person found.
- Their role comes from the directory's groups, the highest of the groups they are in
  (:func:`role_of`): ``console_ldap_admin_group`` → admin, ``..._operator_group`` →
  operator, ``..._viewer_group`` → viewer; in none of them, no access.
- ``console_ldap_enabled_filter`` tells an account that may sign in (Active Directory: bit 2
  of ``userAccountControl`` unset); the others are disabled.
- Passwords never go to the directory in clear beyond this machine: ``ldaps://``, or
  ``ldap://`` with StartTLS (:func:`directory_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from messages.replay import Role
from runtime.settings import Settings

ROLE_ORDER: Final[tuple[Role, ...]] = ("admin", "operator", "viewer")
"""Highest first: a person in several groups has the highest of their roles."""
_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True, slots=True)
class DirectoryConfig:
    url: str
    start_tls: bool
    ca_file: str
    bind_dn: str
    bind_password_file: str
    user_base: str
    user_filter: str
    enabled_filter: str
    member_filter: str
    groups: tuple[tuple[Role, str], ...]
    """(role, group DN) for each group configured, highest role first."""
    timeout_s: float

    @classmethod
    def of(cls, settings: Settings) -> DirectoryConfig | None:
        """The directory of these settings, or None when sign-in is with local accounts
        only."""
        if not settings.console_ldap_url:
            return None
        by_role = {"admin": settings.console_ldap_admin_group,
                   "operator": settings.console_ldap_operator_group,
                   "viewer": settings.console_ldap_viewer_group}
        return cls(
            url=settings.console_ldap_url, start_tls=settings.console_ldap_start_tls,
            ca_file=settings.console_ldap_ca_file, bind_dn=settings.console_ldap_bind_dn,
            bind_password_file=settings.console_ldap_bind_password_file,
            user_base=settings.console_ldap_user_base,
            user_filter=settings.console_ldap_user_filter,
            enabled_filter=settings.console_ldap_enabled_filter,
            member_filter=settings.console_ldap_member_filter,
            groups=tuple((role, by_role[role]) for role in ROLE_ORDER if by_role[role]),
            timeout_s=settings.console_ldap_timeout_s)


def directory_problem(settings: Settings) -> str | None:
    """Why the directory settings cannot be used, or None (no directory is no problem)."""
    config = DirectoryConfig.of(settings)
    if config is None:
        return None
    if not config.user_base:
        return "LEA_CONSOLE_LDAP_URL needs LEA_CONSOLE_LDAP_USER_BASE (where people are)"
    if not config.groups:
        return ("LEA_CONSOLE_LDAP_URL needs at least one of LEA_CONSOLE_LDAP_VIEWER_GROUP, "
                "LEA_CONSOLE_LDAP_OPERATOR_GROUP, LEA_CONSOLE_LDAP_ADMIN_GROUP: the roles "
                "come from the directory's groups")
    if "{name}" not in config.user_filter:
        return "LEA_CONSOLE_LDAP_USER_FILTER must contain {name} (the name typed)"
    if "{dn}" not in config.member_filter:
        return "LEA_CONSOLE_LDAP_MEMBER_FILTER must contain {dn} (the person's DN)"
    for name, value in (("LEA_CONSOLE_LDAP_USER_FILTER", config.user_filter),
                        ("LEA_CONSOLE_LDAP_ENABLED_FILTER", config.enabled_filter),
                        ("LEA_CONSOLE_LDAP_MEMBER_FILTER", config.member_filter)):
        if not (value.startswith("(") and value.endswith(")")):
            return f"{name} must be an LDAP filter in parentheses, not {value!r}"
    if bool(config.bind_dn) != bool(config.bind_password_file):
        return ("LEA_CONSOLE_LDAP_BIND_DN and LEA_CONSOLE_LDAP_BIND_PASSWORD_FILE go together "
                "(the console's service account), or neither (anonymous search)")
    parts = urlsplit(config.url)
    if not parts.hostname:
        return f"LEA_CONSOLE_LDAP_URL={config.url}: no server named"
    if (parts.scheme == "ldap" and not config.start_tls
            and parts.hostname.lower() not in _LOOPBACK_HOSTS):
        return (f"LEA_CONSOLE_LDAP_URL={config.url} would send passwords in clear: use "
                "ldaps:// or set LEA_CONSOLE_LDAP_START_TLS=1")
    return None


def role_of(member_of: set[str], config: DirectoryConfig) -> Role | None:
    """The highest role whose group DN is in ``member_of`` (compared without case), or None
    when the person is in none of Léa's groups."""
    found = {dn.lower() for dn in member_of}
    return next((role for role, dn in config.groups if dn.lower() in found), None)
