"""The Celery side of bench/celery_peer.py: one app, one task, as a team would write them.

A workstation's worker consumes its own queue; the orchestrator sends one step at a time
and waits for its result before the next (the steps of a replay are strictly ordered). The
task does nothing but say when it started and ended (``time.monotonic``: one clock for
every process of this machine), so that the bench sees the time between one step's end and
the next one's start, as bench/turnaround.py does for ours. The broker and result backend
URL comes from ``BENCH_CELERY_REDIS`` (set by the bench, which starts redis-server).
"""

from __future__ import annotations

import os
import time

from celery import Celery

app = Celery("bench_steps", broker=os.environ.get("BENCH_CELERY_REDIS", "redis://"),
             backend=os.environ.get("BENCH_CELERY_REDIS", "redis://"))
app.conf.update(
    task_serializer="msgpack", result_serializer="msgpack", accept_content=["msgpack"],
    # One step at a time per workstation: nothing prefetched past the one running.
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.step")
def step(index: int, kind: str) -> tuple[int, float, float]:
    """A no-op step: ``(index, started, ended)`` on the machine's monotonic clock."""
    started = time.monotonic()
    return index, started, time.monotonic()
