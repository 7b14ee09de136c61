"""The documentation under docs/ stays true to the code: every message type, bus event and
environment variable is described; every function it names as the one deciding a rule
exists where it says; and nothing in the repository sends the reader to a file outside it
(every pointer inside the repository: test_doc_links.py)."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from pydantic_settings import BaseSettings

import messages  # noqa: F401 - registers every message type
from messages import events
from messages.base import model_for, registered_types
from tests.conftest import ROOT

DOCS = ROOT / "docs"
_SKIP_DIRS = {".git", "var", "tests", "bench", "node_modules", ".venv"}


def _doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _sources(*, tests: bool = False) -> list[Path]:
    skip = _SKIP_DIRS - ({"tests", "bench"} if tests else set())
    return [p for p in ROOT.rglob("*.py")
            if not skip.intersection(p.relative_to(ROOT).parts)]


def test_every_message_type_is_in_the_protocol_page() -> None:
    import actors.audit_log.process  # noqa: F401 - every model module, through the actors
    import agent.process  # noqa: F401
    import console.server  # noqa: F401

    page = _doc("protocol.md")
    # Only the project's types: a test module may register its own (tests/fixtures).
    ours = [t for t in registered_types()
            if not (model := model_for(t)) or not model.__module__.startswith("tests")]
    missing = [t for t in ours if f"`{t}`" not in page]
    assert missing == []


def test_every_event_topic_is_in_the_operations_page() -> None:
    page = _doc("operations.md")
    topics = [v for k, v in vars(events).items()
              if k.isupper() and isinstance(v, str) and v.startswith("lea:") and v != "lea:"]
    assert len(topics) > 20
    assert [t for t in topics if f"`{t}`" not in page] == []


def _settings_classes() -> list[type[BaseSettings]]:
    """Every pydantic-settings class of the project (their variables are prefix + field)."""
    found: list[type[BaseSettings]] = []
    for package in ("runtime", "actors", "agent", "supervision", "console", "broker"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name.endswith("__main__"):
                continue  # running it would start a process
            try:
                module = importlib.import_module(info.name)
            except ImportError:
                continue  # another platform's module (Windows): its settings are literal
            found += [c for c in vars(module).values() if isinstance(c, type)
                      and issubclass(c, BaseSettings) and c.__module__ == info.name]
    return found


def test_every_environment_variable_the_code_reads_is_documented() -> None:
    names: set[str] = set()
    for path in _sources():
        names |= set(re.findall(r"\b((?:LEA|RPA)_[A-Z0-9_]*[A-Z0-9])\b",
                                path.read_text(encoding="utf-8")))
    for cls in _settings_classes():
        prefix = str(cls.model_config.get("env_prefix", ""))
        names |= {(prefix + field).upper() for field, info in cls.model_fields.items()
                  if info.validation_alias is None}
    documented = _doc("operations.md") + _doc("grounding.md")
    assert {"LEA_DATA_DIR", "RPA_WATCHDOG_MAX_RESENDS"} <= names
    assert sorted(n for n in names if f"`{n}`" not in documented) == []


def _deciders() -> list[tuple[str, list[str], list[str]]]:
    """(rule, files, names) of each row of architecture.md's "Who decides each rule"."""
    text = _doc("architecture.md")
    section = text.split("## Who decides each rule", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("rule", "---"):
            continue
        tokens = re.findall(r"`([^`]+)`", cells[1])
        files = [t for t in tokens if t.endswith(".py")]
        rows.append((cells[0], files, [t for t in tokens if not t.endswith(".py")]))
    return rows


def test_every_deciding_function_named_in_architecture_exists() -> None:
    """After a refactoring this fails naming the rows whose function moved or was renamed."""
    rows = _deciders()
    assert len(rows) > 20
    broken = []
    for rule, files, names in rows:
        assert files, f"no module named for {rule!r}"
        code = ""
        for f in files:
            path = next((p for p in (ROOT / f, ROOT / "actors/dispatcher" / f,
                                     ROOT / "actors/dispatcher/machine" / f) if p.exists()),
                        None)
            if path is None:
                broken.append(f"{rule}: no file {f}")
                continue
            code += path.read_text(encoding="utf-8")
        for name in names:
            for part in name.split("."):
                if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(part)}\b", code,
                                 re.M):
                    broken.append(f"{rule}: {name} not defined in {files}")
    assert broken == []


# A path into the seed documents or into the machine, or an issue number as a reference:
# the reader who cloned the repository has none of them (docs/ states the rules).
_OUTSIDE = re.compile(r"spec/0\d|DESIGN(?:\.md)? §|DESIGN\.md|notes/[\w-]+\.md|/work/|"
                      r"\bissue \d+\b|\(issue \d+")


def test_nothing_cites_a_file_outside_the_repository() -> None:
    found = []
    for path in [*_sources(tests=True), ROOT / "README.md", *DOCS.glob("*.md")]:
        if path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:80]}")
    assert found == []
