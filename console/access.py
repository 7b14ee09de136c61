"""Who may use the console: pure decisions, applied to every page, /api/ call and stream.

Two gates, one after the other:

- The network (:func:`network_denied`). Listening on loopback (the default), only loopback
  clients are served. In every mode the ``Host`` header must name loopback or one of the
  console's own names (:class:`Network`: ``LEA_CONSOLE_SERVER_NAMES``, the address it
  listens on, the names of its TLS certificate), so that a web page elsewhere whose name
  resolves to the console (DNS rebinding) cannot use it.
- The person (:func:`person_denied`). Every request needs the session cookie of a signed-in
  operator account (console/accounts.py), from loopback too; or, with a token configured, the
  token as ``Authorization: Bearer``, which reads only (scripts, monitoring): it answers no
  pause, since an answer must name a person.
- Listening beyond loopback is refused at start (:func:`config_problem`) without a token
  (``LEA_CONSOLE_TOKEN``, at least :data:`MIN_TOKEN_CHARS` characters) and without TLS: the
  console's own certificate (console/tls.py) or ``LEA_CONSOLE_BEHIND_TLS_PROXY`` saying that
  a proxy of the hospital's ends TLS in front of it. Passwords and session cookies never
  cross the ward's network in clear.
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
_ANY_ADDRESS: Final = frozenset({"0.0.0.0", "::", ""})


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


@dataclass(frozen=True, slots=True)
class Network:
    """Where requests may come from: ``open`` when the console listens beyond loopback;
    ``names``, besides loopback, the lowercase host names a request's ``Host`` may carry."""

    open: bool
    names: frozenset[str]


def server_names(settings: Settings, certificate_names: frozenset[str]) -> frozenset[str]:
    """The console's own names: ``LEA_CONSOLE_SERVER_NAMES``, the address it listens on
    (unless it is every address) and its certificate's names."""
    listed = {n.strip().lower() for n in settings.console_server_names.split(",")}
    host = settings.console_host.strip("[]").lower()
    return frozenset(n for n in (*listed, host, *certificate_names) if n not in _ANY_ADDRESS)


def network_of(settings: Settings, certificate_names: frozenset[str]) -> Network:
    return Network(open=not is_loopback(settings.console_host),
                   names=server_names(settings, certificate_names))


def network_denied(network: Network, client_host: str | None,
                   host_header: str | None) -> Denied | None:
    """None when the request may come from where it comes (see the module docstring)."""
    if not network.open and not is_loopback(client_host):
        return Denied(403, "loopback_only",
                      "the console listens on this machine only (LEA_CONSOLE_HOST)")
    host = host_of(host_header).lower()
    if not is_loopback(host) and host.rstrip(".") not in network.names:
        return Denied(403, "host_not_allowed",
                      f"Host {host_of(host_header)!r} is not a name of this console: open it "
                      "under one of its names (LEA_CONSOLE_SERVER_NAMES, its certificate's), "
                      "or as http://127.0.0.1:<port>/ on the server itself")
    return None


def person_denied(session_state: str) -> Denied:
    """Why a request without a valid session (nor the token) is refused."""
    if session_state == "expired":
        return Denied(401, "session_expired", "your session has expired: sign in again")
    if session_state == "account_disabled":
        return Denied(403, "account_disabled", "this account is disabled")
    return Denied(401, "login_required", "sign in with an operator account first")


def config_problem(settings: Settings) -> str | None:
    """Why the console must not start with these settings, or None (the files are looked at
    by console/tls.py's :func:`tls_problem`)."""
    token = settings.console_token
    if token and len(token) < MIN_TOKEN_CHARS:
        return f"LEA_CONSOLE_TOKEN must have at least {MIN_TOKEN_CHARS} characters"
    if token and token != token.strip():
        return "LEA_CONSOLE_TOKEN must not start or end with spaces"
    if settings.console_behind_tls_proxy and settings.console_tls_cert:
        return ("LEA_CONSOLE_BEHIND_TLS_PROXY and LEA_CONSOLE_TLS_CERT are both set: TLS ends "
                "either at the proxy or at the console, choose one")
    if settings.console_behind_tls_proxy and not settings.console_server_names.strip():
        return ("LEA_CONSOLE_BEHIND_TLS_PROXY needs LEA_CONSOLE_SERVER_NAMES: the name(s) "
                "browsers reach the proxy under (the Host it passes on is checked)")
    if not settings.console_port or is_loopback(settings.console_host):
        return None
    if not token:
        return (f"the console would listen on {settings.console_host}, beyond loopback, with no "
                "access token: set LEA_CONSOLE_TOKEN (at least "
                f"{MIN_TOKEN_CHARS} characters) or keep LEA_CONSOLE_HOST=127.0.0.1")
    if not (settings.console_tls_cert or settings.console_behind_tls_proxy):
        return (f"the console would listen on {settings.console_host}, beyond loopback, in "
                "clear (passwords and session cookies on the network): set "
                "LEA_CONSOLE_TLS_CERT and LEA_CONSOLE_TLS_KEY, or LEA_CONSOLE_BEHIND_TLS_PROXY=1 "
                "if a TLS proxy of yours serves it, or keep LEA_CONSOLE_HOST=127.0.0.1")
    return None


def cookies_secure(settings: Settings, scheme: str) -> bool:
    """Whether the session cookie is ``Secure``: under TLS, the console's or a proxy's."""
    return scheme == "https" or bool(settings.console_tls_cert) or (
        settings.console_behind_tls_proxy)
