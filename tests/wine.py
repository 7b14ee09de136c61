"""Windows CPython under Wine, for tests of the Windows agent on a Linux machine.

What is run is what is shipped: the agent folder built by ``cli/bundle.py`` (embeddable
CPython 3.11, win_amd64 wheels, the agent's code) from this checkout, once per test session,
plus one piece of test infrastructure beside ``python.exe``: ``bcryptprimitives.dll``
(``tests/fixtures/bcryptprimitives.c``, built with mingw-w64), which Wine 8 lacks and real
Windows has. How to use it: docs/windows-agent.md, "The Windows tests, under Wine".

Fixtures (registered by tests/integration/conftest.py; session-scoped unless said):

- ``wine`` -> :class:`Wine`: a fresh WINEPREFIX (the cached one hard-linked, its registry
  copied: change it freely); ``wine.env(**more)`` (e.g. ``DISPLAY=":5"``),
  ``wine.run(argv)`` (to the end, output through a pipe), ``wine.popen(argv, log)``;
  ``wine.prefix``. Its processes and wineserver are stopped at the end of the session.
- ``agent_bundle`` -> :class:`WineBundle`: the folder, with ``root``, ``python_exe`` (Linux
  path), ``launcher``, ``app``, ``site``, ``wine``, ``win(path)`` (a Linux path as Wine's
  ``Z:\\...``), ``python(*args)`` (argv for :meth:`Wine.run` / :meth:`Wine.popen`),
  ``run_python(*args, env=, timeout=)`` and ``popen_python(*args, log=, env=)``.
- ``wine_agent`` (per test) -> ``wine_agent(system, machine_id, scenario=None,
  extra_env=None, extra_args=None, data_dir=None, windowless=False) -> WineAgent``: like
  ``System.agent`` (tests/integration/system.py; same ``start``, ``kill``, ``effects``,
  ``executed``, ``data_dir``), the agent under Wine from the folder against the Linux tree; only the
  ``LEA_*``, ``RPA_*`` and ``DISPLAY`` variables cross over; ``kill(SIGKILL)`` kills the
  Windows process itself.

Everything slow is cached under ``$LEA_WINE_CACHE`` (default ``~/.cache/lea-wine``), keyed by
versions: the downloads (``bundle/``), the template prefix (``prefix-<wine version>``), the
shim (``shim-<source hash>``). ``python -m tests.wine`` fills the cache (scripts/test does;
``--check`` also starts the folder's python once).

On Linux, a missing Wine fails the tests that need it (:func:`require_wine`; scripts/test
installs it); elsewhere they are skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from cli import bundle as bundle_cmd
from tests.history_sources import note_effects_log
from tests.integration.system import Agent, System

ROOT = Path(__file__).resolve().parent.parent
SHIM_SOURCE = ROOT / "tests" / "fixtures" / "bcryptprimitives.c"
APT_PACKAGES = ("wine", "wine64", "gcc-mingw-w64-x86-64")
WINE_BASE_ENV = {
    "WINEDEBUG": "-all",
    # No Mono / Gecko installer dialog when a prefix is made: nothing here needs them.
    "WINEDLLOVERRIDES": "mscoree,mshtml=",
    # Wine converts command lines and file names with the Unix locale: UTF-8 keeps é as é.
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    # Python writes a pipe in the ANSI code page; the logs are read as UTF-8 here.
    "PYTHONIOENCODING": "utf-8",
}


class WineMissing(RuntimeError):
    """Wine or the mingw-w64 compiler is not installed."""


def cache_dir() -> Path:
    return Path(os.environ.get("LEA_WINE_CACHE") or Path.home() / ".cache" / "lea-wine")


def windows_path(path: Path | str) -> str:
    """A Linux path as Windows programs under Wine see it (drive Z: is ``/``)."""
    return "Z:" + str(Path(path).resolve()).replace("/", "\\")


def wine_problem() -> str | None:
    """Why Wine tests cannot run here, or None."""
    missing = [tool for tool in ("wine", "wineserver", "x86_64-w64-mingw32-gcc")
               if shutil.which(tool) is None]
    if missing:
        return (f"{', '.join(missing)} not found: install the Debian packages"
                f" {' '.join(APT_PACKAGES)} (bash scripts/test does)")
    return None


def require_wine() -> None:
    """Skip outside Linux; on Linux (CI included) a missing Wine is a failure, not a skip."""
    if sys.platform != "linux":
        pytest.skip("Windows agent tests run Windows CPython under Wine, on Linux only")
    problem = wine_problem()
    if problem is not None:
        pytest.fail(f"Wine is needed for the Windows agent tests: {problem}")


def _wine_version() -> str:
    out = subprocess.run(["wine", "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _base_env(prefix: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WINE")}
    return {**env, **WINE_BASE_ENV, "WINEPREFIX": str(prefix)}


def template_prefix() -> Path:
    """A WINEPREFIX made once per Wine version (``wineboot`` takes ~15 s), reporting
    Windows 10. Copied, never used in place: tests change its registry (DPI...)."""
    def build(tmp: Path) -> None:
        prefix = tmp / "prefix"
        env = _base_env(prefix)
        env.pop("DISPLAY", None)  # no window needed to make a prefix
        subprocess.run(["wineboot", "-i"], env=env, capture_output=True, check=True,
                       timeout=300)
        subprocess.run(["wine", "reg", "add", r"HKCU\Software\Wine", "/v", "Version", "/d",
                        "win10", "/f"], env=env, capture_output=True, check=True, timeout=120)
        subprocess.run(["wineserver", "-w"], env=env, check=True, timeout=120)

    name = "prefix-" + _wine_version().replace(" ", "_").replace("/", "_")
    return bundle_cmd._cached(cache_dir(), name, build) / "prefix"


def shim_dll() -> Path:
    """``bcryptprimitives.dll`` built from tests/fixtures (test infrastructure only)."""
    source = SHIM_SOURCE.read_bytes()

    def build(tmp: Path) -> None:
        subprocess.run(["x86_64-w64-mingw32-gcc", "-shared", "-O2", "-o",
                        str(tmp / "bcryptprimitives.dll"), str(SHIM_SOURCE), "-ladvapi32"],
                       capture_output=True, check=True, timeout=120)

    key = hashlib.sha256(source).hexdigest()[:16]
    return bundle_cmd._cached(cache_dir(), f"shim-{key}", build) / "bcryptprimitives.dll"


def _copy_output(stream: IO[bytes], log: Path) -> None:
    with open(log, "ab") as out:
        for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
            out.write(chunk)
            out.flush()


@dataclass
class Wine:
    """One WINEPREFIX (its own wineserver) and the processes started in it."""

    prefix: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self, **more: str) -> dict[str, str]:
        """The environment for a Wine process (``more`` on top: DISPLAY, LEA_*...)."""
        return {**_base_env(self.prefix), **more}

    def run(self, argv: list[str], env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a Windows program to its end; stdout and stderr together, through a pipe
        (python.exe cannot write to a regular file given as its stdout under Wine)."""
        return subprocess.run(["wine", *argv], env=env or self.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False,
                              text=True, encoding="utf-8", errors="replace")

    def popen(self, argv: list[str], log: Path,
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a Windows program; its output goes to ``log`` (through a pipe and a
        thread). The Popen's pid is the Windows process itself: kill -9 kills it."""
        proc = subprocess.Popen(["wine", *argv], env=env or self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        assert proc.stdout is not None
        log.touch()  # readable at once: the thread creates it only with the first output
        threading.Thread(target=_copy_output, args=(proc.stdout, log), daemon=True).start()
        self.procs.append(proc)
        return proc

    def stop_processes(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.procs.clear()

    def close(self) -> None:
        """Stop what was started, then the prefix's wineserver (and every Wine process in
        it)."""
        self.stop_processes()
        subprocess.run(["wineserver", "-k"], env=self.env(), capture_output=True, check=False,
                       timeout=30)


def make_wine(where: Path) -> Wine:
    """A new prefix under ``where``: the cached template's ~700 MB of DLLs hard-linked (Wine
    never writes them for the same version), its registry files copied (wineserver saves
    them by writing a new file, but a copy costs nothing)."""
    template, prefix = template_prefix(), where / "prefix"
    shutil.copytree(template, prefix, symlinks=True, copy_function=bundle_cmd.link_or_copy)
    for reg in template.glob("*.reg"):
        (prefix / reg.name).unlink()
        shutil.copy2(reg, prefix / reg.name)
    return Wine(prefix)


@dataclass
class WineBundle:
    """The agent folder (cli/bundle.py) as the tests run it: the shim added beside
    python.exe. ``python(...)`` gives the argv for :meth:`Wine.run` / :meth:`Wine.popen`."""

    bundle: bundle_cmd.Bundle
    wine: Wine

    @property
    def root(self) -> Path:
        return self.bundle.root

    @property
    def python_exe(self) -> Path:
        return self.bundle.python_exe

    @property
    def launcher(self) -> Path:
        return self.bundle.launcher

    @property
    def app(self) -> Path:
        return self.bundle.app

    @property
    def site(self) -> Path:
        return self.bundle.site

    @staticmethod
    def win(path: Path | str) -> str:
        return windows_path(path)

    @property
    def pythonw_exe(self) -> Path:
        """The windowless interpreter (no console: what the log-on task starts)."""
        return self.bundle.pythonw_exe

    def python(self, *args: str) -> list[str]:
        return [str(self.python_exe), *args]

    def run_python(self, *args: str, env: dict[str, str] | None = None,
                   timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.wine.run(self.python(*args), env=env, timeout=timeout)

    def popen_python(self, *args: str, log: Path,
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.wine.popen(self.python(*args), log, env=env)


def make_bundle(out: Path, wine: Wine) -> WineBundle:
    """Build the agent folder from this checkout at ``out`` and add the shim."""
    built = bundle_cmd.build(out, cache_dir() / "bundle", link=True)
    shutil.copy2(shim_dll(), built.python_dir / "bcryptprimitives.dll")
    return WineBundle(built, wine)


@pytest.fixture(scope="session")
def wine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wine]:
    require_wine()
    prepared = make_wine(tmp_path_factory.mktemp("wine"))
    yield prepared
    prepared.close()


@pytest.fixture(scope="session")
def agent_bundle(wine: Wine, tmp_path_factory: pytest.TempPathFactory) -> WineBundle:
    """Installed as docs/windows-agent.md says, under a folder like ``C:\\Program Files\\…``: with a
    space and accents in its path (the launcher's ``%~dp0``, the keys, the default ledger)."""
    where = tmp_path_factory.mktemp("bundle") / "Program Files" / "Léa Santé" / "lea-agent"
    where.parent.mkdir(parents=True)
    return make_bundle(where, wine)


class WineAgent(Agent):
    """A :class:`tests.integration.system.Agent` running under Wine from the bundle: same
    data dir, effects log and scenario files (on the Linux side, reached as ``Z:``), same
    log names (``agent-<M>-w<n>.log`` in the system's folder). Only the ``LEA_*`` /
    ``RPA_*`` settings and ``DISPLAY`` cross over: the Linux PATH or PYTHONPATH mean nothing
    to the Windows interpreter. ``data_dir`` may be chosen (spaces, non-ASCII...)."""

    def __init__(self, bundle: WineBundle, system: System, machine_id: str,
                 scenario: dict[str, Any] | None = None,
                 extra_env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None, data_dir: Path | None = None,
                 windowless: bool = False) -> None:
        self.bundle = bundle
        self.windowless = windowless  # pythonw.exe: nothing on stdout, the log file only
        self.starts = 0
        self.chosen_data_dir = data_dir
        merged = {**system.env, **(extra_env or {})}
        self.wine_env = bundle.wine.env(
            PYTHONUNBUFFERED="1",
            **{k: v for k, v in merged.items() if k.startswith(("LEA_", "RPA_", "DISPLAY"))})
        super().__init__(system, machine_id, scenario, extra_env, extra_args)

    def start(self) -> None:
        if self.chosen_data_dir is not None:
            self.data_dir = self.chosen_data_dir
        argv = ["-m", "agent", "--machine-id", self.machine_id, "--data-dir",
                windows_path(self.data_dir), "--effects-log", windows_path(self.effects_path)]
        if self.scenario_path is not None:
            argv += ["--scenario", windows_path(self.scenario_path)]
        argv += self.extra_args
        log = self.system.tmp / f"agent-{self.machine_id}-w{self.starts}.log"
        self.starts += 1
        exe = self.bundle.pythonw_exe if self.windowless else self.bundle.python_exe
        self.proc = self.bundle.wine.popen([str(exe), *argv], log, env=self.wine_env)


WineAgentFactory = Callable[..., WineAgent]


@pytest.fixture
def wine_agent(agent_bundle: WineBundle,
               request: pytest.FixtureRequest) -> Iterator[WineAgentFactory]:
    """``wine_agent(system, machine_id, scenario=None, extra_env=None, extra_args=None,
    data_dir=None, windowless=False) -> WineAgent``: an agent under Wine (``pythonw.exe``
    if ``windowless``) against ``system``'s tree (the Linux tree of
    tests/integration/system.py); killed at teardown."""
    started: list[WineAgent] = []

    def make(system: System, machine_id: str, scenario: dict[str, Any] | None = None,
             extra_env: dict[str, str] | None = None, extra_args: list[str] | None = None,
             data_dir: Path | None = None, windowless: bool = False) -> WineAgent:
        agent = WineAgent(agent_bundle, system, machine_id, scenario, extra_env, extra_args,
                          data_dir, windowless)
        started.append(agent)
        note_effects_log(request.node, agent.effects_path)  # for the history check
        return agent

    yield make
    for agent in started:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                agent.proc.wait(timeout=10)


def prepare(check: bool = False) -> dict[str, float]:
    """Fill the cache (template prefix, shim, bundle downloads); seconds each step took.
    ``check``: also build a folder and start its python under Wine once."""
    timings: dict[str, float] = {}
    for name, step in (("prefix", template_prefix), ("shim", shim_dll),
                       ("python", lambda: bundle_cmd.fetch_python(cache_dir() / "bundle")),
                       ("site", lambda: bundle_cmd.fetch_site(cache_dir() / "bundle"))):
        started = time.monotonic()
        step()
        timings[name] = round(time.monotonic() - started, 1)
    if not check:
        return timings
    with tempfile.TemporaryDirectory(prefix="lea-wine-") as tmp:
        started = time.monotonic()
        wine = make_wine(Path(tmp))
        try:
            bundle = make_bundle(Path(tmp) / "lea-agent", wine)
            timings["bundle"] = round(time.monotonic() - started, 1)
            started = time.monotonic()
            done = bundle.run_python("-c", "import sys, agent.process;"
                                           " print(sys.platform)")
            timings["first_run"] = round(time.monotonic() - started, 1)
            if done.returncode != 0 or "win32" not in done.stdout:
                raise WineMissing(f"the bundle's python does not start under Wine:"
                                  f" {done.stdout[-2000:]}")
        finally:
            wine.close()
    return timings


if __name__ == "__main__":
    if (problem := wine_problem()) is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    print("wine cache ready:", cache_dir(), prepare(check="--check" in sys.argv[1:]))
