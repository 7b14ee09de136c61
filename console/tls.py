"""The console's TLS: its certificate and key are checked before anything listens, and the
names the certificate is for are names the console may be reached under (docs/operations.md,
"The console over TLS").

- :func:`tls_on`: both ``console_tls_cert`` and ``console_tls_key`` are set.
- :func:`tls_problem` (reads the files): why the console must not start with them, or None:
  one set without the other, a file missing or unreadable, a key readable by others than its
  owner (as ssh refuses a private key anyone may read), or a key that is not the
  certificate's. The same check runs in ``python run.py`` before the tree starts, so a bad
  certificate stops the tree with one clear line instead of a console restarting in a loop.
- :func:`certificate_names`: the DNS names and addresses of the certificate's
  subjectAltName, which :mod:`console.access` accepts in ``Host``.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import stat
from pathlib import Path

from cryptography import x509

from runtime.settings import Settings


def tls_on(settings: Settings) -> bool:
    return bool(settings.console_tls_cert and settings.console_tls_key)


def tls_problem(settings: Settings) -> str | None:
    """Why the certificate settings cannot be served, or None (see the module docstring)."""
    cert, key = settings.console_tls_cert, settings.console_tls_key
    if not settings.console_port or (not cert and not key):
        return None
    if not cert or not key:
        given, missing = (("LEA_CONSOLE_TLS_CERT", "LEA_CONSOLE_TLS_KEY") if cert
                          else ("LEA_CONSOLE_TLS_KEY", "LEA_CONSOLE_TLS_CERT"))
        return f"{given} is set but {missing} is not: set both (PEM files) or neither"
    for name, path in (("LEA_CONSOLE_TLS_CERT", cert), ("LEA_CONSOLE_TLS_KEY", key)):
        if not Path(path).is_file():
            return f"{name}={path}: no such file"
    if os.name == "posix" and Path(key).stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (f"LEA_CONSOLE_TLS_KEY={key} may be read by other users than its owner: "
                f"chmod 600 {key}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError, ValueError) as exc:
        return (f"LEA_CONSOLE_TLS_CERT / LEA_CONSOLE_TLS_KEY cannot be used together "
                f"({exc}): a PEM certificate chain and the private key that goes with it")
    return None


def certificate_names(cert_path: str) -> frozenset[str]:
    """The lowercase DNS names and addresses the certificate is for (its subjectAltName);
    empty when it has none or cannot be read (then only the other names are accepted)."""
    try:
        certificate = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
        alt = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except (OSError, ValueError, x509.ExtensionNotFound):
        return frozenset()
    names: set[str] = {n.lower() for n in alt.value.get_values_for_type(x509.DNSName)}
    names.update(str(a) for a in alt.value.get_values_for_type(x509.IPAddress)
                 if isinstance(a, ipaddress.IPv4Address | ipaddress.IPv6Address))
    return frozenset(names)
