"""``python -m console``: serve the console with uvicorn, as a child of the supervisor.

- Heartbeats (runtime/liveness.py) are sent from the event loop itself: a loop stuck in
  a blocking call stops beating, and the supervisor replaces the process.
- The listening socket is bound here, not by uvicorn: a port in use (another tree, another
  program) is retried every few seconds with a clear log line, instead of a crash loop that
  would spend the tree's restart intensity on a web page.
- SIGTERM / SIGINT: uvicorn stops, the open event streams are ended, exit 0 (uvicorn
  re-raises the signal once stopped: the handler it then finds is ours, which only asks to
  stop, so the process ends normally).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from types import FrameType

import uvicorn
from loguru import logger

from console.access import is_loopback
from console.app import create_app
from console.startup_checks import startup_problem
from console.tls import tls_on
from runtime.liveness import BEAT_INTERVAL_S, Beacon
from runtime.settings import Settings

BIND_RETRY_S = (1.0, 2.0, 5.0)
SHUTDOWN_GRACE_S = 1


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; OSError if it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


async def _beat(beacon: Beacon) -> None:
    while True:
        beacon.beat()
        await asyncio.sleep(BEAT_INTERVAL_S)


async def _bound(host: str, port: int, server: uvicorn.Server) -> socket.socket | None:
    """Bind, retrying while the port is taken; None if asked to stop meanwhile."""
    attempt = 0
    while not server.should_exit:
        try:
            return bind(host, port)
        except OSError as exc:
            wait = BIND_RETRY_S[min(attempt, len(BIND_RETRY_S) - 1)]
            logger.error("console: cannot listen on {}:{} ({}); trying again in {} s "
                         "(choose another with --console-port / LEA_CONSOLE_PORT)",
                         host, port, exc.strerror or exc, wait)
            attempt += 1
            for _ in range(int(wait / 0.25)):
                if server.should_exit:
                    break
                await asyncio.sleep(0.25)
    return None


async def serve(settings: Settings) -> int:
    beacon = Beacon.from_env()
    beats = asyncio.create_task(_beat(beacon), name="console-beacon")
    tls = tls_on(settings)
    # The certificate and key were checked in run() (console/tls.py); uvicorn loads them.
    config = uvicorn.Config(create_app(settings), log_level="warning", access_log=False,
                            timeout_graceful_shutdown=SHUTDOWN_GRACE_S, lifespan="on",
                            ssl_certfile=settings.console_tls_cert if tls else None,
                            ssl_keyfile=settings.console_tls_key if tls else None)
    server = uvicorn.Server(config)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        server.should_exit = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    try:
        sock = await _bound(settings.console_host, settings.console_port, server)
        if sock is None:
            return 0
        logger.info("console: {}://{}:{}/ ({})", "https" if tls else "http",
                    settings.console_host, settings.console_port,
                    "loopback only" if is_loopback(settings.console_host)
                    else "beyond loopback")
        with sock:
            await server.serve(sockets=[sock])
        return 0
    finally:
        beats.cancel()


def run(settings: Settings) -> int:
    problem = startup_problem(settings)
    if problem is not None:
        print(f"error: console: {problem}", file=sys.stderr)
        return 2
    if settings.console_port == 0:
        logger.info("console: disabled (console_port = 0)")
        return 0
    return asyncio.run(serve(settings))
