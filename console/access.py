"""Who may use the console: pure decisions, applied to every page, /api/ call and stream.

Two gates, one after the other:

- The network (:func:`network_denied`). No token configured (the default): the console
  listens on loopback only, and only loopback clients are served. The ``Host`` header must
  name loopback too, so that a web page elsewhere whose name resolves to 127.0.0.1 (DNS
  rebinding) cannot use it. With a token (``LEA_CONSOLE_TOKEN``, at least
  :data:`MIN_TOKEN_CHARS` characters) the console may listen beyond loopback.
- The person (:func:`person_denied`). Every request needs the session cookie of a signed-in
  operator account (console/accounts.py), from loopback too; or, with a token configured, the
  token as ``Authorization: Bearer``, which reads only (scripts, monitoring): it answers no
  pause, since an answer must name a person.
- Listening beyond loopback without a token is refused at start (:func:`config_problem`).
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Final

from runtime.settings import Settings

MIN_TOKEN_CHARS: Final = 16
SESSION_COOKIE: Final = "lea_console_session"
MAX_COOKIE_CHARS: Final = 128
_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.", "ip6-localhost"})


@dataclass(frozen=True, slots=True)
class Denied:
    """Why a request is refused: an HTTP status, a stable code and a sentence for people."""

    status: int
    code: str
    message: str


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or a host name, maybe ``[::1]``) is this machine."""
    if not host:
        return False
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_of(host_header: str | None) -> str:
    """The host name of a ``Host`` header, without the port (``[::1]:8765`` → ``::1``)."""
    value = (host_header or "").strip()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def token_matches(token: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(token.encode(), presented.encode())


def network_denied(token: str, client_host: str | None,
                   host_header: str | None) -> Denied | None:
    """None when the request may come from where it comes (see the module docstring)."""
    if token:
        return None
    if not is_loopback(client_host):
        return Denied(403, "loopback_only",
                      "without LEA_CONSOLE_TOKEN on the server, only this machine may connect")
    if not is_loopback(host_of(host_header)):
        return Denied(403, "host_not_allowed",
                      f"Host {host_of(host_header)!r} is not this machine: open the console as "
                      "http://127.0.0.1:<port>/ (or configure LEA_CONSOLE_TOKEN)")
    return None


def person_denied(session_state: str) -> Denied:
    """Why a request without a valid session (nor the token) is refused."""
    if session_state == "expired":
        return Denied(401, "session_expired", "your session has expired: sign in again")
    if session_state == "account_disabled":
        return Denied(403, "account_disabled", "this account is disabled")
    return Denied(401, "login_required", "sign in with an operator account first")


def config_problem(settings: Settings) -> str | None:
    """Why the console must not start with these settings, or None."""
    token = settings.console_token
    if token and len(token) < MIN_TOKEN_CHARS:
        return f"LEA_CONSOLE_TOKEN must have at least {MIN_TOKEN_CHARS} characters"
    if token and token != token.strip():
        return "LEA_CONSOLE_TOKEN must not start or end with spaces"
    if settings.console_port and not token and not is_loopback(settings.console_host):
        return (f"the console would listen on {settings.console_host}, beyond loopback, with no "
                "access token: set LEA_CONSOLE_TOKEN (at least "
                f"{MIN_TOKEN_CHARS} characters) or keep LEA_CONSOLE_HOST=127.0.0.1")
    return None
