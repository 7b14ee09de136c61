"""``run.py tap [PREFIX]``: print bus events live, one line each (or JSON lines)."""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

import zmq

from messages.events import Event
from runtime.settings import Settings
from transport.bus import Subscriber


def format_event(event: Event) -> str:
    """``12:00:01.234 lea:actor_restarted supervisor name=watchdog pid=123``."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event.at)) + f".{int(event.at % 1 * 1000):03d}"
    fields = " ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}"
                      for k, v in event.data.items())
    return f"{stamp} {event.topic} {event.source} {fields}".rstrip()


def tap(settings: Settings, prefix: str = "lea:", as_json: bool = False,
        out: TextIO = sys.stdout, limit: int | None = None) -> int:
    """Print events until interrupted (or ``limit`` events); returns an exit code."""
    sub = Subscriber(zmq.Context.instance(), settings.bus_out_endpoint, prefix)
    seen = 0
    try:
        while limit is None or seen < limit:
            event = sub.recv(timeout_s=0.5)
            if event is None:
                continue
            line = (json.dumps(event.model_dump(mode="json"), ensure_ascii=False)
                    if as_json else format_event(event))
            print(line, file=out, flush=True)
            seen += 1
    except KeyboardInterrupt:
        pass
    finally:
        sub.close()
    return 0
