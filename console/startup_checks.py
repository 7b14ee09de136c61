"""Everything the console checks before it listens, in one call for the console itself and
for ``python run.py`` (which checks before it starts the tree, so that a setting the
console cannot take stops the tree with one line, exit 2, instead of a console restarting in
a loop): the access rules (console/access.py), the directory's settings
(console/directory_rules.py) and its service account's password file, the certificate
(console/tls.py). A key or a password file others may read is refused, as ssh refuses
a private key anyone may read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from console.access import config_problem
from console.directory_rules import directory_problem
from console.tls import tls_problem
from runtime.settings import Settings


def startup_problem(settings: Settings) -> str | None:
    """Why the console must not start with these settings, or None."""
    if not settings.console_port:
        return None
    found = config_problem(settings) or directory_problem(settings) or tls_problem(settings)
    if found is not None:
        return found
    secret = settings.console_ldap_bind_password_file
    if settings.console_ldap_url and secret:
        name = f"LEA_CONSOLE_LDAP_BIND_PASSWORD_FILE={secret}"
        try:
            if not Path(secret).read_text().strip():
                return f"{name} is empty"
            if os.name == "posix" and Path(secret).stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                return f"{name} may be read by other users than its owner: chmod 600 {secret}"
        except OSError as exc:
            return f"{name}: {exc.strerror or exc}"
    return None
