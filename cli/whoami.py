"""Who runs a command on this machine, for the audit trail beside the ``--operator`` name."""

from __future__ import annotations

import getpass
import os

MAX_CHARS = 128


def os_user() -> str:
    """The operating-system account of this process, from its user id (not ``$USER``, which
    any caller sets as it likes); under sudo, also who ran sudo: ``root (sudo: alice)``."""
    try:
        import pwd

        name = pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):  # Windows, or a uid with no passwd entry
        try:
            name = getpass.getuser()
        except OSError:
            name = f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "unknown"
    sudo = os.environ.get("SUDO_USER", "")
    if sudo and sudo != name and hasattr(os, "geteuid") and os.geteuid() == 0:
        name = f"{name} (sudo: {sudo})"
    return name[:MAX_CHARS]
