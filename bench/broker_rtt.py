"""Broker latency and throughput, each beside floors measured in the same run.

    python bench/broker_rtt.py [--round-trips 6000] [--seconds 5]

(a) raw DEALER <-> ROUTER echo over tcp loopback (the floor); (b) client -> broker -> worker ->
broker -> client with a 300-byte msgpack body; (c) the broker's forwarding rate (requests +
replies per second) with 100 DEALER clients in 2 processes, one request each in flight, one
worker; (d) the ratios against the targets. (b0)/(c0) run the same through a bare forwarder
(a dozen lines, no validation, no heartbeats, no state to speak of): the best a Python
ROUTER loop does here, so what is left between (b) and (b0) is the broker's own work, and
what is left between (b0) and (a) is the extra process hop. The round trips of (a), (b0),
(b) take turns, so that machine noise hits them alike. Every peer is its own process; the
broker is started here on free ports with ``python -m broker``. Takes about 30 s.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq
from zmq.backend import Socket as _RawSocket

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the project's packages

from transport.frames import send_frames  # noqa: E402

C_HDR, W_HDR = b"MDPC02", b"MDPW02"
SERVICE = b"bench"
CLIENT_PROCS, CLIENTS_PER_PROC = 2, 50
_recv = _RawSocket.recv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def body_300() -> bytes:
    """A msgpack map of about 300 bytes, shaped like an action report."""
    doc: dict[str, Any] = {"v": 1, "type": "action_report", "id": "0" * 32, "body": {
        "replay_id": "r" * 32, "step": 12, "status": "done", "monitor": 1,
        "x": 812, "y": 455, "detail": "d" * 150}}
    data: bytes = msgpack.packb(doc)
    return data


# -- peer processes -------------------------------------------------------------------------

def recv_wait(sock: zmq.Socket[bytes]) -> list[bytes]:
    """A blocking ``recv_multipart`` (raises zmq.Again after RCVTIMEO), minus pyzmq's Python
    layers like :func:`transport.frames.send_frames`: every peer here, floors included, uses
    these two, so that the figures compare the paths rather than pyzmq wrappers."""
    frame = _recv(sock, 0, False)
    frames = [frame.bytes]
    while frame.more:
        frame = _recv(sock, 0, False)
        frames.append(frame.bytes)
    return frames


def echo_server(endpoint: str) -> None:
    sock = zmq.Context().socket(zmq.ROUTER)
    sock.bind(endpoint)
    while True:
        send_frames(sock, recv_wait(sock))


def bare_forwarder(endpoint: str) -> None:
    """The least a Python MDP broker can do: route REQUEST/FINAL, answer mmi.service."""
    sock = zmq.Context().socket(zmq.ROUTER)
    sock.bind(endpoint)
    workers: list[bytes] = []
    queue: list[list[bytes]] = []
    send = functools.partial(send_frames, sock)
    while True:
        f = recv_wait(sock)
        if f[1] == C_HDR:
            if f[3] == b"mmi.service":
                send([f[0], C_HDR, b"\x03", f[3], b"200" if workers else b"404"])
            elif workers:
                send([workers.pop(), W_HDR, b"\x02", f[0], b"", *f[4:]])
            else:
                queue.append(f)
        elif f[2] == b"\x04":
            if queue:
                q = queue.pop(0)
                send([f[0], W_HDR, b"\x02", q[0], b"", *q[4:]])
            else:
                workers.append(f[0])
            send([f[3], C_HDR, b"\x03", SERVICE, *f[5:]])
        elif f[2] == b"\x01":
            workers.append(f[0])


def worker(endpoint: str) -> None:
    """An MDP/0.2 worker from the RFC text: READY, then FINAL with the request's body;
    HEARTBEAT after 1 s without sending (the broker's default interval)."""
    ctx = zmq.Context()
    while True:  # a new socket after each DISCONNECT (RFC 18)
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 1000)
        sock.connect(endpoint)
        sock.send_multipart([W_HDR, b"\x01", SERVICE])
        send, clock = functools.partial(send_frames, sock), time.monotonic
        beat_at = clock() + 1.0
        while True:
            try:
                frames = recv_wait(sock)
            except zmq.Again:
                frames = [W_HDR, b"\x05"]
            if frames[1] == b"\x02":
                send([W_HDR, b"\x04", frames[2], b"", *frames[4:]])
                beat_at = clock() + 1.0
            elif frames[1] == b"\x06":
                sock.close()
                break
            elif clock() >= beat_at:
                send([W_HDR, b"\x05"])
                beat_at = clock() + 1.0


def clients(endpoint: str, count: int, start_at: float, end_at: float) -> None:
    """``count`` DEALERs, one request each in flight; prints replies counted in the window.

    The load must cost little CPU, or on a small machine it takes it from the broker: so a
    plain poll on the sockets' ZMQ_FDs (zmq_poll would check all ``count`` sockets on every
    call), then ZMQ_EVENTS of the sockets it names, until each reports no reply waiting.
    """
    ctx = zmq.Context()
    request = [C_HDR, b"\x01", SERVICE, body_300()]
    poller = select.poll()
    by_fd: dict[int, tuple[zmq.Socket[bytes], list[tuple[zmq.Socket[bytes], int]]]] = {}
    for _ in range(count):
        s: zmq.Socket[bytes] = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send_multipart(request)
        by_fd[s.FD] = (s, [(s, zmq.POLLIN)])
        poller.register(s.FD, select.POLLIN)
    counted = 0
    todo = list(by_fd)  # look at every socket once: a send may have eaten its fd's signal
    while (now := time.time()) < end_at:
        for fd in todo:
            s, waiting = by_fd[fd]
            while zmq.zmq_poll(waiting, 0):
                recv_wait(s)
                send_frames(s, request)
                if now >= start_at:
                    counted += 1
        todo = [fd for fd, _ in poller.poll(100)]
    print(json.dumps({"replies": counted}), flush=True)
    ctx.destroy(0)


# -- measurements -------------------------------------------------------------------------

def rtts(paths: dict[str, tuple[zmq.Socket[bytes], list[bytes]]],
         n: int) -> dict[str, list[float]]:
    """Round-trip times in microseconds, ``n`` per path, one path after the other in turn so
    that every path sees the same moments of a noisy machine."""
    out: dict[str, list[float]] = {name: [] for name in paths}
    clock = time.perf_counter_ns
    for _ in range(n):
        for name, (sock, frames) in paths.items():
            t0 = clock()
            send_frames(sock, frames)
            recv_wait(sock)
            out[name].append((clock() - t0) / 1000.0)
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100.0 * len(ordered)))]


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User + system CPU seconds of process ``pid``: (all its threads, its main thread)."""
    out = []
    for path in (f"/proc/{pid}/stat", f"/proc/{pid}/task/{pid}/stat"):
        try:
            fields = Path(path).read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0, 0.0
        out.append((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return out[0], out[1]


def spawn(*args: str, env: dict[str, str] | None = None,
          stdout: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], env=env, cwd=ROOT, stdout=stdout)


def wait_for_worker(sock: zmq.Socket[bytes]) -> None:
    for _ in range(100):
        sock.send_multipart([C_HDR, b"\x01", b"mmi.service", SERVICE])
        if sock.poll(10_000) and sock.recv_multipart()[3] == b"200":
            return
        time.sleep(0.05)
    raise SystemExit("the worker never registered with the broker")


def forwarding(me: str, endpoint: str, pid: int,
               seconds: float) -> tuple[float, tuple[float, float]]:
    """(messages forwarded per second, CPU seconds the broker used meanwhile: process, main
    thread; the rest is libzmq's I/O thread)."""
    start_at = time.time() + 1.5  # connect and warm up first
    end_at = start_at + seconds
    loaders = [spawn(me, "--clients", endpoint, str(CLIENTS_PER_PROC), str(start_at),
                     str(end_at), stdout=subprocess.PIPE) for _ in range(CLIENT_PROCS)]
    time.sleep(max(0.0, start_at - time.time()))
    before = cpu_seconds(pid)
    time.sleep(max(0.0, end_at - time.time()))
    after = cpu_seconds(pid)
    cpu = (after[0] - before[0], after[1] - before[1])
    replies = 0
    for p in loaders:
        out, _ = p.communicate(timeout=seconds + 30)
        replies += json.loads(out.decode().strip().splitlines()[-1])["replies"]
    return 2 * replies / seconds, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--round-trips", type=int, default=6000, help="per path")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()

    ep = {name: f"tcp://127.0.0.1:{free_port()}"
          for name in ("mdp", "bus_in", "bus_out", "echo", "bare")}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LEA_LOG_LEVEL": "WARNING",
           "LEA_MDP_ENDPOINT": ep["mdp"], "LEA_BUS_IN_ENDPOINT": ep["bus_in"],
           "LEA_BUS_OUT_ENDPOINT": ep["bus_out"]}
    me = str(Path(__file__).resolve())
    broker = subprocess.Popen([sys.executable, "-m", "broker"], env=env, cwd=ROOT)
    print(f"broker pid {broker.pid} (py-spy record -p {broker.pid} to profile it)",
          file=sys.stderr, flush=True)
    bare = spawn(me, "--bare-forwarder", ep["bare"])
    procs = [bare, spawn(me, "--echo-server", ep["echo"]), spawn(me, "--worker", ep["mdp"]),
             spawn(me, "--worker", ep["bare"])]
    ctx = zmq.Context()
    try:
        socks = {}
        for name in ("echo", "bare", "mdp"):
            socks[name] = ctx.socket(zmq.DEALER)
            socks[name].connect(ep[name])
        wait_for_worker(socks["mdp"])
        wait_for_worker(socks["bare"])

        body = body_300()
        request = [C_HDR, b"\x01", SERVICE, body]
        paths = {"echo": (socks["echo"], [body]), "bare": (socks["bare"], request),
                 "mdp": (socks["mdp"], request)}
        rtts(paths, 500)  # warm-up
        us = rtts(paths, args.round_trips)

        fwd, cpu = forwarding(me, ep["mdp"], broker.pid, args.seconds)
        fwd0, cpu0 = forwarding(me, ep["bare"], bare.pid, args.seconds)
    finally:
        ctx.destroy(0)
        for p in procs:
            p.kill()
            p.wait()
        broker.send_signal(signal.SIGTERM)
        broker_rc = broker.wait(10)

    p50 = {name: pct(v, 50) for name, v in us.items()}
    p99 = {name: pct(v, 99) for name, v in us.items()}
    n = len(us["echo"])

    def cpu_line(cpu_s: tuple[float, float], rate: float) -> str:
        if not rate:
            return ""
        per_msg = [c / (rate * args.seconds) * 1e6 for c in cpu_s]
        return (f"; CPU {per_msg[0]:.0f} us/msg ({per_msg[1]:.0f} in the Python thread), "
                f"{cpu_s[0] / args.seconds:.0%} of a core")

    print(f"(a)  raw DEALER<->ROUTER echo, tcp loopback, 300 B: p50 {p50['echo']:6.1f} us  "
          f"p99 {p99['echo']:7.1f} us  (n={n})")
    print(f"(b)  client->broker->worker->client, 300 B msgpack: p50 {p50['mdp']:6.1f} us  "
          f"p99 {p99['mdp']:7.1f} us")
    print(f"(b0) same through the bare forwarder:              p50 {p50['bare']:6.1f} us  "
          f"p99 {p99['bare']:7.1f} us")
    print(f"(c)  forwarding, {CLIENT_PROCS * CLIENTS_PER_PROC} clients x 1 in flight, 1 worker: "
          f"{fwd:8,.0f} msg/s{cpu_line(cpu, fwd)}")
    print(f"(c0) same through the bare forwarder:                {fwd0:8,.0f} msg/s"
          f"{cpu_line(cpu0, fwd0)}")
    print(f"(d)  rtt p50 / raw p50 = {p50['mdp'] / p50['echo']:.2f} (target <= 3.5); "
          f"bare forwarder {p50['bare'] / p50['echo']:.2f}; broker / bare "
          f"{p50['mdp'] / p50['bare']:.2f}")
    print(f"     forwarding = {fwd:,.0f} msg/s (target >= 25,000); bare forwarder "
          f"{fwd0:,.0f}; broker / bare {fwd / fwd0 if fwd0 else 0:.2f}")
    print(f"     broker exit status after SIGTERM: {broker_rc}")
    ok = p50["mdp"] / p50["echo"] <= 3.5 and fwd >= 25_000 and broker_rc == 0
    return 0 if ok else 1


MODES = {"--echo-server": echo_server, "--bare-forwarder": bare_forwarder, "--worker": worker}

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] in MODES:
        MODES[sys.argv[1]](sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "--clients":
        clients(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit(main())
