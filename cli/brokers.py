"""``run.py brokers``: where each broker stands (``mmi.broker``), the pair's in one look.

Each broker of ``LEA_MDP_ENDPOINT`` and ``LEA_MDP_BACKUP_ENDPOINT`` is asked on its own (a
client given both would ask only the first that answers): role, state, what it last heard
of its peer, and the messages it held and turned away (docs/operations.md, "A broker
pair"). The exit status says whether exactly one serves.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from runtime.settings import Settings
from transport.client import CallFailed, SyncClient

MMI_BROKER = "mmi.broker"


def broker_state(endpoint: str, timeout_s: float) -> dict[str, Any]:
    """One row: the broker's own answer, or ``state`` ``unreachable`` / ``bad_answer``."""
    row: dict[str, Any] = {"endpoint": endpoint}
    client = SyncClient(endpoint)
    try:
        body = client.raw(MMI_BROKER, b"", timeout_s=timeout_s, retries=0)
        said = json.loads(body[0]) if body else None
    except CallFailed:
        return {**row, "state": "unreachable"}
    except ValueError:
        return {**row, "state": "bad_answer"}
    finally:
        client.close()
    if not isinstance(said, dict):
        return {**row, "state": "bad_answer"}
    return {**row, **said}


def passive_here(settings: Settings, timeout_s: float = 1.0) -> str | None:
    """Why a command given on this server would go unanswered: its broker is the passive one
    of a pair whose other broker serves (it turns people's requests away; docs/two-servers.md).
    None when it serves, is unreachable (the command says so itself), or is passive with its
    peer unheard for an expiry: it may take over and serve the request."""
    row = broker_state(settings.control_mdp_endpoint, timeout_s)
    heard = row.get("peer_heard_s_ago")
    if (row.get("state") != "passive" or row.get("peer_state") != "active"
            or not isinstance(heard, int | float) or heard >= settings.heartbeat_expiry_s):
        return None
    return (f"this server's broker ({row.get('role')}) is passive: the other broker of its "
            "pair serves, and commands are taken on that server only "
            "(`python run.py brokers` shows both)")


def said_passive(settings: Settings, as_json: bool = False) -> bool:
    """True, with the reason on stderr (and a JSON error line with ``as_json``), when this
    server's broker is :func:`passive_here`: the command stops at once instead of waiting
    out its retries."""
    why = passive_here(settings)
    if why is None:
        return False
    if as_json:
        print(json.dumps({"error": "broker_passive", "message": why, "detail": {}}))
    print(f"error: broker_passive: {why}", file=sys.stderr)
    return True


def serving(rows: list[dict[str, Any]]) -> int:
    """0 when exactly one broker is active (a broker alone counts), else 1."""
    return 0 if sum(row.get("state") == "active" for row in rows) == 1 else 1


def brokers(settings: Settings, as_json: bool = False, timeout_s: float = 2.0) -> int:
    """Print one line per broker; exit 1 unless exactly one serves."""
    rows = [broker_state(endpoint, timeout_s) for endpoint in settings.mdp_endpoints]
    for row in rows:
        if as_json:
            print(json.dumps(row))
            continue
        heard = row.get("peer_heard_s_ago")
        print(f"{row['endpoint']:<28} {row.get('role', '-'):<8} {row['state']:<12} "
              f"peer {row.get('peer_state') or '-':<8} heard "
              f"{'-' if heard is None else f'{heard:g} s ago':<12} held "
              f"{row.get('held', '-')}  refused {row.get('refused', '-')}")
    return serving(rows)
