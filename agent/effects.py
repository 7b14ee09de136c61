"""The effects log: one JSON line per input the executor actually performed.

Tests count its lines to prove an action ran exactly once, so a line is written and fsync'ed
right after the effect, before anything else can happen (a crash, the report). Each line is
one ``write`` on an ``O_APPEND`` file: several agents, or an agent and its restarted self,
can share one log without interleaving.

Each line names its replay, so that a log several replays (or several trees) wrote can be
checked against the audit trail replay by replay (tests/history.py). Lines written before
``replay_id`` was added lack it: readers take them by their ``attempt_id``, which the trail's
dispatch record names.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from messages.dispatch import DispatchAction, InputPerformed


class EffectsLog:
    """Append-only JSON lines ``{replay_id, action_id, attempt_id, type, machine_id, at,
    monitor}``: ``monitor`` is the dispatch's monitor resolution's ``reason`` or ``source``
    (``router_unavailable`` when the monitor router did not answer), ``agent_routes`` when
    this agent found the monitor itself (docs/screens-and-pauses.md), or null."""

    def __init__(self, path: str | Path, machine_id: str) -> None:
        self.path = Path(path)
        self.machine_id = machine_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def record(self, dispatch: DispatchAction) -> None:
        """Append the effect of ``dispatch`` and make it durable before returning."""
        resolution = dispatch.monitor_resolution
        line = json.dumps({
            "replay_id": dispatch.replay_id,
            "action_id": dispatch.action.action_id,
            "attempt_id": dispatch.attempt_id,
            "type": dispatch.action.type,
            "machine_id": self.machine_id,
            "at": time.time(),
            "monitor": "agent_routes" if dispatch.agent_routes else (
                None if resolution is None else resolution.reason or resolution.source),
        }, ensure_ascii=False) + "\n"
        with self._lock:
            os.write(self._fd, line.encode())
            os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_effects(path: str | Path) -> list[dict[str, Any]]:
    """Every line of an effects log (an absent file has none)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class InputTracker:
    """Whether one attempt's input reached the workstation (the report's
    ``input_performed``), and its line in the effects log once it did.

    ``none`` until an input event is about to be sent, ``unknown`` while it is being sent
    (an exception there leaves it so: the event may or may not have gone out), ``performed``
    once one was sent. Only ``none`` may be retried automatically.
    """

    def __init__(self, dispatch: DispatchAction, log: EffectsLog | None) -> None:
        self.dispatch, self.log = dispatch, log
        self.state: InputPerformed = "none"

    @property
    def performed(self) -> bool:
        return self.state == "performed"

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Around the calls that send one input (a click, keys, a paste)."""
        if self.state == "none":
            self.state = "unknown"
        yield
        if self.state != "performed":
            self.state = "performed"
            if self.log is not None:
                self.log.record(self.dispatch)
