"""What the benchmarks share: a private tree (`python run.py`), an echo worker, the broker
round trip floor, statistics and the output format.

Every benchmark starts its own tree on free ports with a temporary data directory, so it
measures exactly the code of this checkout and leaves nothing behind. Figures are printed
beside a floor measured in the same run: the machines are shared and noisy, ratios matter.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import zmq  # noqa: E402
from loguru import logger  # noqa: E402

from actors import ACTORS  # noqa: E402
from cli.ping import service_pid  # noqa: E402
from messages.codec import encode  # noqa: E402
from messages.dispatch import DispatchAction, DispatchMeta  # noqa: E402
from messages.workflow import Action, Workflow  # noqa: E402
from runtime.settings import Settings  # noqa: E402
from supervision.tree import child_pid  # noqa: E402
from transport import mdp  # noqa: E402
from transport.client import SyncClient  # noqa: E402
from transport.worker import Worker  # noqa: E402

ECHO = "bench.echo"


def quiet_logs() -> None:
    """Warnings and errors only from our own (bench) process."""
    logger.remove()
    logger.add(sys.stderr, level="WARNING", diagnose=False, backtrace=False)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Statistics and output ------------------------------------------------------------------

def pct(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values``; nan if empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:9.3f} ms"


def row(label: str, values: Sequence[float]) -> str:
    """``label  p50  p99  max  n`` for samples in seconds."""
    return (f"  {label:<36} p50 {ms(pct(values, 50))}   p99 {ms(pct(values, 99))}   "
            f"max {ms(max(values) if values else float('nan'))}   n={len(values)}")


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) used so far by process ``pid``; 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


class CpuMeter:
    """CPU used by named processes between :meth:`start` and :meth:`stop` calls."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.used: dict[str, float] = {}
        self._start: dict[str, float] = {}

    def start(self) -> None:
        self._start = {name: cpu_s(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        """Add what was used since :meth:`start` (intervals add up)."""
        for name, pid in self.pids.items():
            self.used[name] = self.used.get(name, 0.0) + cpu_s(pid) - self._start[name]
        return self.used

    def per_step(self, steps: int) -> str:
        """``total N µs (name n, ...)``, largest first, per step."""
        total = sum(self.used.values())
        parts = ", ".join(f"{name} {used / steps * 1e6:.0f}" for name, used in
                          sorted(self.used.items(), key=lambda kv: -kv[1]) if used > 0)
        return f"{total / steps * 1e6:.0f} µs ({parts})"


# Workflows ------------------------------------------------------------------------------

def noop_workflow(steps: int, action_type: str = "wait", workflow_id: str = "bench") -> Workflow:
    """``steps`` actions that do nothing on a simulated desktop (ids s0, s1, ...)."""
    def action(i: int) -> dict[str, Any]:
        if action_type == "wait":
            return {"action_id": f"s{i}", "type": "wait", "parameters": {"duration_ms": 0}}
        # Two places in turn: the same input three times in a row is a loop (the detector's
        # action_repeat), which would pause the replay.
        return {"action_id": f"s{i}", "type": action_type,
                "target_spec": {"x_pct": 0.25 + 0.5 * (i % 2), "y_pct": 0.5}}

    return Workflow.model_validate({"workflow_id": workflow_id,
                                    "actions": [action(i) for i in range(steps)]})


def dispatch_sized_body() -> bytes:
    """An encoded DispatchAction like the ones the dispatcher sends: the echo floor's body."""
    return encode(DispatchAction(
        replay_id="0" * 32, session_id="0" * 32, machine_id="bench-0",
        action=Action.model_validate({"action_id": "s0", "type": "wait",
                                      "parameters": {"duration_ms": 0}}),
        attempt_id="0" * 32, dispatch_meta=DispatchMeta(first_dispatched_at=time.time())))


# The tree -------------------------------------------------------------------------------

class Tree:
    """``python run.py`` (broker + six actors under the supervisor) on free ports.

    Child output goes to ``<tmp>/tree.log``; the temporary directory is removed on close
    unless ``keep``. The watchdog keeps its production defaults unless ``extra_env`` says.
    """

    def __init__(self, extra_env: dict[str, str] | None = None, keep: bool = False,
                 heartbeat_ms: int = 1000) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="lea-bench-"))
        self.keep = keep
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.env = dict(os.environ)
        self.env.update(
            LEA_MDP_ENDPOINT=self.endpoint,
            LEA_BUS_IN_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
            LEA_BUS_OUT_ENDPOINT=f"tcp://127.0.0.1:{free_port()}",
            LEA_DATA_DIR=str(self.tmp / "var"),
            LEA_HEARTBEAT_INTERVAL_MS=str(heartbeat_ms),
            # The recovery bench kills the dispatcher repeatedly: not a crash loop to stop.
            LEA_RESTART_INTENSITY="50",
            # No web console: it is nobody's step cost, and its port is fixed.
            LEA_CONSOLE_PORT="0",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        self.env.update(extra_env or {})
        self.procs: list[subprocess.Popen[bytes]] = []
        self.tree = self.spawn([sys.executable, "run.py"], "tree")
        # The bench speaks for people and the tree (starts, the watchdog's view...): through
        # the tree's door, where such calls are taken; agents use ``endpoint``.
        self.door = Settings(data_dir=Path(self.env["LEA_DATA_DIR"]),
                             tree_endpoint=self.env.get("LEA_TREE_ENDPOINT", "")
                             ).tree_mdp_endpoint
        self.client = SyncClient(self.door)

    def spawn(self, argv: list[str], name: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        """A process of ours, in its own session (so that close() can end its children)."""
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        kwargs.setdefault("stdout", log)
        kwargs.setdefault("stderr", subprocess.STDOUT)
        kwargs.setdefault("env", self.env)
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            argv, cwd=ROOT, start_new_session=True, **kwargs)
        log.close()
        self.procs.append(proc)
        return proc

    def wait_ready(self, services: Sequence[str] = tuple(ACTORS), timeout: float = 60) -> float:
        """Seconds until every service answers a ping."""
        start = time.monotonic()
        waiting = list(services)
        while waiting:
            self.check()
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"not ready after {timeout}s: {waiting}; see {self.tmp}")
            if self.pid(waiting[0]) is not None:
                waiting.pop(0)
            else:
                time.sleep(0.05)
        return time.monotonic() - start

    def check(self) -> None:
        """Raise if the tree has exited (a bench must not wait out its timeout for nothing)."""
        if self.tree.poll() is not None:
            raise RuntimeError(f"the tree exited ({self.tree.returncode}) during the bench; "
                               f"see {self.tmp}/tree.log")

    def pid(self, service: str, timeout_s: float = 0.5) -> int | None:
        return service_pid(self.client, service, timeout_s)

    def child_pid(self, name: str) -> int:
        """The pid of the supervisor's child ``name`` (``broker`` or an actor)."""
        pid = child_pid(self.tree.pid, name)
        if pid is None:
            raise LookupError(name)
        return pid

    def pids(self) -> dict[str, int]:
        """The tree's processes by name: the supervisor, the broker and the six actors."""
        found = {"supervisor": self.tree.pid}
        for name in ("broker", *ACTORS):
            with contextlib.suppress(LookupError):
                found[name] = self.child_pid(name)
        return found

    def echo_worker(self) -> subprocess.Popen[bytes]:
        """A trivial worker of ``bench.echo`` in its own process: the floor's far end."""
        proc = self.spawn([sys.executable, str(Path(__file__)), "echo", self.endpoint], "echo")
        self.wait_registered(ECHO)
        return proc

    def wait_registered(self, service: str, timeout: float = 30) -> None:
        """Until the broker has a worker for ``service`` (MMI: no request reaches it)."""
        deadline = time.monotonic() + timeout
        while self.client.raw("mmi.service", service.encode())[:1] != [b"200"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no worker of {service} after {timeout}s")
            time.sleep(0.05)

    def close(self) -> None:
        self.client.close()
        for proc in reversed(self.procs):  # ours only: each in its own process group
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.keep:
            print(f"(logs and data kept in {self.tmp})")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


@contextlib.contextmanager
def tree(**kwargs: Any) -> Iterator[Tree]:
    """A started :class:`Tree`, closed on exit, Ctrl-C and SIGTERM included."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    t = Tree(**kwargs)
    try:
        t.wait_ready()
        yield t
    finally:
        t.close()
        signal.signal(signal.SIGTERM, previous)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


# The floor: client -> broker -> echo worker -> broker -> client --------------------------

def broker_round_trips(endpoint: str, n: int, body: bytes, timeout_s: float = 5.0) -> list[float]:
    """``n`` sequential echo round trips through the broker (seconds each), 10 warm-up first."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    request = mdp.client_request(ECHO.encode(), body)
    samples: list[float] = []
    clock = time.perf_counter
    try:
        for i in range(n + 10):
            start = clock()
            sock.send_multipart(request)
            if not sock.poll(int(timeout_s * 1000)):
                raise RuntimeError("the echo worker did not answer")
            sock.recv_multipart()
            if i >= 10:
                samples.append(clock() - start)
    finally:
        sock.close(0)
    return samples


def echo_main(endpoint: str) -> int:
    """The echo worker process: replies with the request's own body, never decodes it."""
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    quiet_logs()
    ctx: zmq.Context[Any] = zmq.Context()
    worker = Worker(ctx, endpoint, ECHO, heartbeat_interval_s=1.0)
    try:
        while not stopping:
            if worker.socket.poll(100):
                for request in worker.drain():
                    worker.reply(request, *request.body)
            worker.tick()
    finally:
        worker.close()
        ctx.term()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "echo":
        sys.exit(echo_main(sys.argv[2]))
    print("usage: benchkit.py echo ENDPOINT (started by the benchmarks)", file=sys.stderr)
    sys.exit(2)
