"""A throwaway OpenSSH server on 127.0.0.1 for the tunnel tests (docs/protocol.md).

Its own config, host key, client key, authorized_keys and known_hosts, all under the test's
tmp directory; it lets the client forward to one port only (the broker's). Debian packages:
openssh-server, openssh-client (scripts/test installs them).
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Spawn, free_port, wait_until

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")  # sshd refuses to start without it


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lea-test", "-f",
                    str(path)], check=True)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Sshd:
    """A running sshd: where to log in, with which key, and which host key to expect."""

    port: int
    user: str
    client_key: Path
    known_hosts: Path
    proc: subprocess.Popen[bytes]

    @property
    def target(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"

    def agent_args(self) -> list[str]:
        """The agent flags that go through this server."""
        return ["--ssh", self.target, "--ssh-key", str(self.client_key),
                "--ssh-known-hosts", str(self.known_hosts)]


def start_sshd(spawn: Spawn, tmp: Path, forward_port: int) -> Sshd:
    """Start sshd on a free port; it permits forwarding to 127.0.0.1:``forward_port`` only."""
    for tool in (SSHD, "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: install openssh-server and openssh-client "
                        "(scripts/test does)")
    if not PRIVSEP_DIR.is_dir():
        if os.geteuid() != 0:
            pytest.skip(f"{PRIVSEP_DIR} is missing and only root can create it")
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    base = tmp / "sshd"
    base.mkdir()
    host_key, client_key = base / "host_key", base / "client_key"
    _keygen(host_key)
    _keygen(client_key)
    authorized = base / "authorized_keys"
    # As docs/remote-agents.md advises: this key may forward to the broker's port and do nothing
    # else.
    authorized.write_text(f'restrict,port-forwarding,permitopen="127.0.0.1:{forward_port}" '
                          + client_key.with_suffix(".pub").read_text())
    port = free_port()
    known_hosts = base / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.with_suffix('.pub').read_text()}")
    user = getpass.getuser()
    config = base / "sshd_config"
    config.write_text("\n".join([
        "ListenAddress 127.0.0.1", f"Port {port}", f"HostKey {host_key}",
        f"AuthorizedKeysFile {authorized}", f"PidFile {base / 'sshd.pid'}",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no",  # the keys live under /tmp
        "PermitRootLogin prohibit-password", f"AllowUsers {user}",
        "AllowTcpForwarding local", f"PermitOpen 127.0.0.1:{forward_port}",
        "PermitTTY no", "X11Forwarding no", "AllowAgentForwarding no", "LogLevel VERBOSE",
        "",
    ]))
    proc = spawn([SSHD, "-D", "-e", "-f", str(config)], name="sshd")
    wait_until(lambda: _accepts(port) or proc.poll() is not None, timeout=10)
    assert proc.poll() is None, "sshd exited at start: see its log"
    return Sshd(port, user, client_key, known_hosts, proc)
