"""The SSH tunnel an agent opens itself (``--ssh USER@HOST[:PORT]``), kept open for its life.

The broker stays bound to 127.0.0.1 on its host (docs/protocol.md). The agent runs the system
``ssh -N -L 127.0.0.1:LOCAL:BROKER_HOST:BROKER_PORT`` and connects its sockets to the local
end. When ssh exits (network cut, server restart, kill), a supervising thread starts it again
after a backoff, on the same local port, and the ZeroMQ sockets reconnect by themselves;
what was in flight meanwhile is covered by the protocol's own retries (the reports' backoff,
the dispatcher's resends), so nothing is lost (docs/protocol.md, "libzmq behaviours").

Pure parts (parsing, the ssh command line, the backoff) are plain functions and classes; the
:class:`Tunnel` thread is the only I/O.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

HOST_KEY_CHECKS = ("yes", "accept-new", "no")
ALIVE_INTERVAL_S = 5
"""ServerAliveInterval: a dead path is noticed after about 3 × this and ssh exits."""

# No leading '-' in a user or host: ssh would take it for an option.
_TARGET = re.compile(r"^(?:(?P<user>[^-@\s:][^@\s:]*)@)?"
                     r"(?P<host>\[[^\]\s]+\]|[^-@\s:\[\]][^@\s:\[\]]*)"
                     r"(?::(?P<port>\d{1,5}))?$")
_TCP = re.compile(r"^tcp://(?P<host>\[[^\]]+\]|[^:/]+):(?P<port>\d{1,5})$")


class TunnelError(ValueError):
    """A tunnel that cannot be set up as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class SshTarget:
    """Where ssh logs in: ``[user@]host[:port]`` (IPv6 hosts in brackets)."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


def parse_target(text: str) -> SshTarget:
    """``USER@HOST[:PORT]`` → SshTarget; raises TunnelError."""
    match = _TARGET.match(text.strip())
    port = int(match["port"]) if match and match["port"] else None
    if match is None or (port is not None and not 0 < port < 65536):
        raise TunnelError(f"--ssh {text!r}: expected USER@HOST[:PORT]")
    return SshTarget(match["host"].strip("[]"), match["user"], port)


def parse_tcp_endpoint(endpoint: str) -> tuple[str, int]:
    """(host, port) of ``tcp://host:port``; a wildcard host means this host's loopback."""
    match = _TCP.match(endpoint)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise TunnelError(f"{endpoint!r} is not a tcp://HOST:PORT endpoint")
    host = match["host"].strip("[]")
    return ("127.0.0.1" if host in ("*", "0.0.0.0") else host), int(match["port"])


@dataclass(frozen=True, slots=True)
class TunnelSpec:
    """Everything the ssh command line is made of."""

    target: SshTarget
    local_port: int
    remote_host: str  # the broker's host as the SSH server sees it (usually 127.0.0.1)
    remote_port: int
    key_file: Path | None = None
    known_hosts: Path | None = None
    host_key_check: str | None = None  # None: ssh's own configuration decides
    options: tuple[str, ...] = ()  # extra ``-o`` options, as given
    ssh: str = "ssh"

    @property
    def local_endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.local_port}"


def ssh_argv(spec: TunnelSpec) -> list[str]:
    """The ssh command line: no remote command, forward only, never ask anything."""
    remote = f"[{spec.remote_host}]" if ":" in spec.remote_host else spec.remote_host
    argv = [spec.ssh, "-N", "-T",
            "-o", "BatchMode=yes",  # a service has nobody to type a password or say yes
            "-o", "ExitOnForwardFailure=yes",  # no half-open tunnel: exit, and we retry
            "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}",
            "-o", "ServerAliveCountMax=3",
            "-L", f"127.0.0.1:{spec.local_port}:{remote}:{spec.remote_port}"]
    if spec.key_file is not None:
        argv += ["-i", str(spec.key_file), "-o", "IdentitiesOnly=yes"]
    if spec.known_hosts is not None:
        argv += ["-o", f"UserKnownHostsFile={spec.known_hosts}"]
    if spec.host_key_check is not None:
        argv += ["-o", f"StrictHostKeyChecking={spec.host_key_check}"]
    for option in spec.options:
        argv += ["-o", option]
    if spec.target.port is not None:
        argv += ["-p", str(spec.target.port)]
    user = f"{spec.target.user}@" if spec.target.user else ""
    argv += ["--", f"{user}{spec.target.host}"]  # nothing after this is an option
    return argv


class Backoff:
    """Delays before ssh is started again: short after a tunnel that held, growing while
    it keeps failing (a wrong key must not become a busy loop)."""

    DELAYS_S: tuple[float, ...] = (0.2, 1.0, 2.0, 5.0, 10.0, 30.0)
    STABLE_S = 30.0  # a tunnel up this long was fine: the next failure starts over

    def __init__(self) -> None:
        self.failures = 0

    def after_exit(self, uptime_s: float) -> float:
        """The delay before the next start, for an ssh that ran ``uptime_s``."""
        if uptime_s >= self.STABLE_S:
            self.failures = 0
        delay = self.DELAYS_S[min(self.failures, len(self.DELAYS_S) - 1)]
        self.failures += 1
        return delay


def free_local_port() -> int:
    """A free port on 127.0.0.1, chosen once: every ssh of this agent listens there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tunnel:
    """Runs ssh for ``spec`` and starts it again whenever it exits, until :meth:`stop`."""

    def __init__(self, spec: TunnelSpec) -> None:
        if shutil.which(spec.ssh) is None:
            raise TunnelError(f"no {spec.ssh!r} command found: install an OpenSSH client")
        self.spec = spec
        self.argv = ssh_argv(spec)
        self.backoff = Backoff()
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ssh-tunnel", daemon=True)

    def start(self) -> None:
        logger.info("ssh tunnel: {} -> {}:{} via {}", self.spec.local_endpoint,
                    self.spec.remote_host, self.spec.remote_port, self.spec.target)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            with self._lock:
                if self._stop.is_set():
                    return
                try:
                    self._proc = proc = subprocess.Popen(
                        self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)
                except OSError as exc:
                    logger.error("ssh tunnel: cannot run {}: {}", self.spec.ssh, exc)
                    proc = None
            if proc is not None:
                self.starts += 1
                logger.info("ssh tunnel: ssh started (pid {}, start {})", proc.pid, self.starts)
                last = self._relay_stderr(proc)
                code = proc.wait()
                if self._stop.is_set():
                    return
                logger.warning("ssh tunnel: ssh exited with status {} after {:.1f} s{}", code,
                               time.monotonic() - started, f": {last}" if last else "")
            delay = self.backoff.after_exit(time.monotonic() - started)
            logger.info("ssh tunnel: starting ssh again in {:g} s", delay)
            self._stop.wait(delay)

    @staticmethod
    def _relay_stderr(proc: subprocess.Popen[bytes]) -> str:
        """Log what ssh says until it exits; returns its last line (the usual reason)."""
        last = ""
        assert proc.stderr is not None
        with proc.stderr as stream:  # closed here: one pipe per restart must not leak
            for raw in stream:
                line = raw.decode("utf-8", "replace").strip()
                if line:
                    last = line
                    logger.warning("ssh: {}", line)
        return last

    def stop(self, timeout_s: float = 3.0) -> None:
        """Stop ssh and the thread; the tunnel is not started again."""
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
