"""``run.py ping``: call every service through the broker, print its status and round trip."""

from __future__ import annotations

import json
import time

from actors import ACTORS
from messages.control import Ping, Pong
from runtime.settings import Settings
from transport.client import CallFailed, SyncClient


def service_pid(client: SyncClient, service: str, timeout_s: float = 0.5) -> int | None:
    """The pid of the process serving ``service`` (from its Pong), or None if none answers."""
    try:
        reply = client.call(service, Ping(), timeout_s=timeout_s, retries=0)
    except CallFailed:
        return None
    return reply.body.pid if isinstance(reply.body, Pong) else None


def ping_service(client: SyncClient, service: str, timeout_s: float) -> dict[str, object]:
    """One row: service, status (ok | missing | no_reply | error), rtt_ms, pid."""
    row: dict[str, object] = {"service": service, "status": "ok", "rtt_ms": None, "pid": None}
    if service.startswith("mmi."):
        return _ping_broker(client, service, timeout_s, row)
    try:
        presence = client.raw("mmi.service", service.encode(), timeout_s=timeout_s, retries=0)
    except CallFailed:
        row["status"] = "broker_unreachable"
        return row
    if presence[:1] != [b"200"]:
        row["status"] = "missing"
        return row
    start = time.perf_counter()
    try:
        reply = client.call(service, Ping(), timeout_s=timeout_s, retries=1)
    except CallFailed as exc:
        row["status"] = "no_reply" if exc.code == "timeout" else f"error:{exc.code}"
        return row
    row["rtt_ms"] = round((time.perf_counter() - start) * 1000, 3)
    if isinstance(reply.body, Pong):
        row["pid"] = reply.body.pid
        row["status"] = reply.body.status
    return row


def _ping_broker(client: SyncClient, service: str, timeout_s: float,
                 row: dict[str, object]) -> dict[str, object]:
    """An ``mmi.*`` service is the broker's own (no worker): its answer goes in ``answer``
    (``mmi.broker``: the broker's role and state; ``run.py brokers`` asks each broker)."""
    start = time.perf_counter()
    try:
        body = client.raw(service, b"", timeout_s=timeout_s, retries=0)
    except CallFailed:
        row["status"] = "broker_unreachable"
        return row
    row["rtt_ms"] = round((time.perf_counter() - start) * 1000, 3)
    row["answer"] = b"".join(body).decode("utf-8", "replace")
    if row["answer"] == "501":
        row["status"] = "unknown_mmi"
    return row


def ping(settings: Settings, services: list[str] | None = None, as_json: bool = False,
         timeout_s: float = 2.0) -> int:
    """Print one line per service; exit code 1 if any is not ok."""
    client = SyncClient(settings.mdp_endpoints)
    try:
        rows = [ping_service(client, s, timeout_s) for s in services or list(ACTORS)]
    finally:
        client.close()
    for row in rows:
        if as_json:
            print(json.dumps(row))
        else:
            rtt = f"{row['rtt_ms']:.2f} ms" if row["rtt_ms"] is not None else "-"
            answer = f"  {row['answer']}" if "answer" in row else ""
            print(f"{row['service']:<16} {row['status']:<18} {rtt:>10}  "
                  f"pid={row['pid'] or '-'}{answer}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1
