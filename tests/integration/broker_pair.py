"""A broker pair for tests and the bench (docs/operations.md, "A broker pair"): the tree's
broker as primary, a second ``python -m broker`` as backup, and a watcher that asks both
where they stand (``mmi.broker``) to prove they were never active at once."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import zmq

from tests.conftest import free_port
from transport.client import CallFailed, SyncClient


def _tcp() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def pair_env(env: dict[str, str], tmp: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(the tree's extra environment, the backup broker's environment), from a tree's
    ``env``: each broker its own endpoints, door and data; peers given both."""
    # In ``tmp``, removed with it once the processes are gone (an ipc path has at most 107
    # bytes: pytest's temporary folders and the bench's are short enough).
    doors = tmp / "d"
    if len(str(doors / "a" / "tree.sock")) > 100:  # ipc paths: 107 bytes at most
        raise ValueError(f"{tmp}: too long a folder for the brokers' doors (a shorter name)")
    state_a, state_b, mdp_b = _tcp(), _tcp(), _tcp()
    door_a, door_b = f"ipc://{doors}/a/tree.sock", f"ipc://{doors}/b/tree.sock"
    tree = {
        "LEA_BROKER_ROLE": "primary", "LEA_BROKER_STATE_ENDPOINT": state_a,
        "LEA_BROKER_PEER_STATE_ENDPOINT": state_b, "LEA_TREE_ENDPOINT": door_a,
        "LEA_MDP_BACKUP_ENDPOINT": mdp_b, "LEA_TREE_BACKUP_ENDPOINT": door_b,
    }
    backup = {
        **env, **tree, "LEA_BROKER_ROLE": "backup", "LEA_BROKER_STATE_ENDPOINT": state_b,
        "LEA_BROKER_PEER_STATE_ENDPOINT": state_a, "LEA_MDP_ENDPOINT": mdp_b,
        "LEA_TREE_ENDPOINT": door_b, "LEA_BUS_IN_ENDPOINT": _tcp(),
        "LEA_BUS_OUT_ENDPOINT": _tcp(), "LEA_DATA_DIR": str(tmp / "var-backup"),
        "LEA_MDP_BACKUP_ENDPOINT": env["LEA_MDP_ENDPOINT"], "LEA_TREE_BACKUP_ENDPOINT": door_a,
    }
    return tree, backup


def broker_state(endpoint: str, ctx: zmq.Context[Any] | None = None,
                 timeout_s: float = 0.3) -> dict[str, Any] | None:
    """What the broker at ``endpoint`` says of itself (``mmi.broker``), None if silent."""
    client = SyncClient(endpoint, ctx)
    try:
        body = client.raw("mmi.broker", b"", timeout_s=timeout_s, retries=0)
        return dict(json.loads(body[0]))
    except (CallFailed, ValueError, IndexError):
        return None
    finally:
        client.close()


class PairWatch:
    """Asks both brokers where they stand, over and over, in a thread.

    A round asks A, then B, then A again: if A said ``active`` both times and B said
    ``active`` in between, both were active at B's answer (A does not step down and come
    back within one round)."""

    def __init__(self, a: str, b: str) -> None:
        self.a, self.b = a, b
        self.both: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.seen: dict[str, set[str]] = {a: set(), b: set()}
        self.rounds = 0
        self._stop = threading.Event()
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            a1 = broker_state(self.a, self._ctx)
            b = broker_state(self.b, self._ctx)
            a2 = broker_state(self.a, self._ctx)
            for endpoint, said in ((self.a, a1), (self.b, b), (self.a, a2)):
                if said is not None:
                    self.seen[endpoint].add(said["state"])
            if (a1 and b and a2 and a1["state"] == b["state"] == a2["state"] == "active"):
                self.both.append((a1, b))
            self.rounds += 1
            self._stop.wait(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._ctx.destroy(linger=0)
