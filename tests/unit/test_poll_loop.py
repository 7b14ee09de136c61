"""The poll loop of every actor and the agent (transport/poll_loop.py): readable sockets to
their handlers, hooks in order, timers, wake-ups from threads and signals, stop and linger.

A poll here waits up to an hour when nothing wakes it: a wake-up that does not work hangs
the test until pytest's timeout, it never passes by waiting.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Collection, Iterator
from typing import Any

import pytest
import zmq

from transport.poll_loop import Pollable, PollLoop, Timers

HOUR_S = 3600.0


@pytest.fixture
def ctx() -> Iterator[zmq.Context[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    yield context
    context.term()


def test_readable_sockets_go_to_their_handler_then_the_hooks_in_order(
        ctx: zmq.Context[Any]) -> None:
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    idle = ctx.socket(zmq.PULL)
    pull.bind("inproc://loop-test")
    push.connect("inproc://loop-test")
    idle.bind("inproc://loop-idle")
    loop = PollLoop("test", wait_s=HOUR_S)
    seen: list[Any] = []

    def on_ready(ready: Collection[Pollable]) -> None:
        seen.append(("ready", list(ready)))
        seen.append(("got", pull.recv()))

    loop.watch(lambda: (idle, pull), on_ready)
    loop.each_turn(lambda now: seen.append("first hook"))
    loop.each_turn(lambda now: seen.append("second hook"))
    push.send(b"x")
    loop.turn()
    assert seen == [("ready", [pull]), ("got", b"x"), "first hook", "second hook"]
    for sock in (pull, push, idle):
        sock.close(0)


def test_a_thread_wakes_the_loop() -> None:
    loop = PollLoop("test", wait_s=HOUR_S)
    loop.deadline(lambda: 0.0 if not turns else None)  # the first turn does not wait
    turns: list[float] = []

    def hook(now: float) -> None:
        turns.append(now)
        if len(turns) == 1:  # the next poll waits for the thread
            threading.Thread(target=loop.wake).start()
        else:
            loop.stop()

    loop.each_turn(hook)
    loop.run()
    assert len(turns) == 2


def test_linger_keeps_the_loop_turning_after_a_stop() -> None:
    loop = PollLoop("test", wait_s=HOUR_S)
    left = [3]

    def hook(_now: float) -> None:
        left[0] -= 1
        loop.wake()  # the work the loop lingers for goes on meanwhile

    loop.each_turn(hook)
    loop.stop("a test")
    loop.run(linger=lambda: left[0] > 0)
    assert left == [0]


def test_a_deadline_bounds_the_wait() -> None:
    loop = PollLoop("test", wait_s=HOUR_S)
    loop.deadline(lambda: 0.0)  # long past: the poll returns at once
    loop.deadline(lambda: None)  # nothing due: no bound
    turns: list[float] = []

    def hook(now: float) -> None:
        turns.append(now)
        if len(turns) == 2:
            loop.stop()

    loop.each_turn(hook)
    loop.run()
    assert len(turns) == 2


def test_timers_run_when_due_and_again_an_interval_later() -> None:
    timers = Timers("test")
    calls: list[float] = []
    timers.every(10.0, calls.append)
    due = timers.next_deadline()
    assert due is not None
    timers.tick(due - 1.0)
    assert calls == []
    timers.tick(due)
    assert calls == [due] and timers.next_deadline() == due + 10.0

    def failing(_now: float) -> None:
        raise RuntimeError("a failing timer is logged, and runs again")

    timers.every(1.0, failing)
    failing_due = timers.next_deadline()
    assert failing_due is not None and failing_due < due + 10.0
    timers.tick(failing_due)
    assert timers.next_deadline() == failing_due + 1.0
    timers.tick(due + 10.0)
    assert calls == [due, due + 10.0]


def test_a_signal_stops_the_loop_at_once_and_its_handler_stays() -> None:
    loop = PollLoop("test", wait_s=HOUR_S)
    got: list[str] = []

    def on_signal(name: str) -> None:
        got.append(name)
        loop.stop(name)

    turns: list[float] = []
    loop.deadline(lambda: 0.0 if not turns else None)  # the first turn does not wait

    def hook(now: float) -> None:
        turns.append(now)
        if len(turns) == 1:  # the next poll waits for the signal
            threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM)).start()

    loop.each_turn(hook)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with loop.signals(on_signal):
            loop.run()
        assert got == ["SIGTERM"]
        assert signal.getsignal(signal.SIGTERM) not in (before[signal.SIGTERM],
                                                        signal.SIG_DFL)
        assert signal.set_wakeup_fd(-1) == -1  # the wake-up fd is given back
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
