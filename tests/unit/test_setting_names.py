"""The one list of settings (runtime/setting_names.py) against the source that reads them, and
the rule for names it lacks."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from runtime.setting_names import unknown_settings
from runtime.settings import known_settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "messages", "workflow", "transport", "audit_outbox", "broker",
            "supervision", "actors", "agent", "cli", "console")
NAME = re.compile(r"\b(?:LEA|RPA)_[A-Z0-9_]*[A-Z0-9]\b")


REGISTRY = ROOT / "runtime" / "setting_names.py"  # the list itself reads nothing


def _sources() -> list[Path]:
    return [ROOT / "run.py"] + [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
                                if p != REGISTRY]


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the bare string statements (docstrings): prose, not names read."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _settings_class_names(node: ast.ClassDef) -> set[str]:
    """``prefix + FIELD`` for a pydantic-settings class with an ``env_prefix``."""
    prefix = None
    for stmt in node.body:
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                and any(isinstance(t, ast.Name) and t.id == "model_config"
                        for t in stmt.targets)):
            for kw in stmt.value.keywords:
                if kw.arg == "env_prefix" and isinstance(kw.value, ast.Constant):
                    prefix = str(kw.value.value)
    if prefix is None:
        return set()
    names = set()
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        aliased = isinstance(stmt.value, ast.Call) and any(
            kw.arg == "validation_alias" for kw in stmt.value.keywords)
        if not aliased:  # an alias is read under its own name (a string, scanned below)
            names.add(prefix + stmt.target.id.upper())
    return names


@functools.cache
def names_in_source() -> dict[str, str]:
    """Every LEA_/RPA_ variable name the code holds, with where it first appears."""
    found: dict[str, str] = {}
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose = _docstrings(tree)
        where = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for name in _settings_class_names(node):
                    found.setdefault(name, where)
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in prose):
                for name in NAME.findall(node.value):
                    found.setdefault(name, where)
    return found


def test_every_name_the_code_reads_is_known() -> None:
    unknown = {n: w for n, w in names_in_source().items() if n not in known_settings()}
    assert not unknown, f"add these to runtime/setting_names.py: {unknown}"


def test_every_known_name_is_read_somewhere() -> None:
    assert sorted(known_settings() - set(names_in_source())) == []


def test_the_scan_sees_every_kind_of_reader() -> None:
    found = names_in_source()
    # a pydantic-settings field, a literal, a loop-detector table
    for name in ("LEA_CONSOLE_SESSION_LIFETIME_S", "LEA_DESKTOP_SCREENSHOT_QUALITY",
                 "RPA_LOOP_RING_SIZE", "LEA_MONITOR_HEARTBEAT_POLL_S"):
        assert name in found, name
    assert "RPA_SAFETY_CHECKS_OLLAMA_URL" not in found  # read as OLLAMA_URL (an alias)


def test_a_misspelt_name_is_refused_with_the_name_it_looks_like() -> None:
    refused, warned = unknown_settings(
        ["LEA_CONSOLE_SESION_LIFETIME_S", "LEA_DESKTOP_SCREENSHOT_QUALITE", "LEA_OCR_LANG",
         "RPA_WATCHDOG_ORPHAN_TIMEOUT", "LEA_WATCHDOG_ENABLED", "PATH"], known_settings())
    assert refused == [
        "unknown setting LEA_CONSOLE_SESION_LIFETIME_S: did you mean "
        "LEA_CONSOLE_SESSION_LIFETIME_S?",
        "unknown setting LEA_DESKTOP_SCREENSHOT_QUALITE: did you mean "
        "LEA_DESKTOP_SCREENSHOT_QUALITY?",
        "unknown setting LEA_OCR_LANG: did you mean LEA_OCR_LANGS?",
        "unknown setting LEA_WATCHDOG_ENABLED: did you mean RPA_WATCHDOG_ENABLED?",
        "unknown setting RPA_WATCHDOG_ORPHAN_TIMEOUT: did you mean "
        "RPA_WATCHDOG_ORPHAN_TIMEOUT_S?",
    ]
    assert warned == []


def test_a_name_like_none_is_a_warning_unless_under_a_prefix_of_ours() -> None:
    refused, warned = unknown_settings(
        ["LEA_CHAOS_SEED", "RPA_FOO", "RPA_WATCHDOG_FOO", "LEA_OCR_XYZZY", "LEA_MDP_ENDPOINT"],
        known_settings())
    assert warned == ["unknown setting LEA_CHAOS_SEED: nothing reads it",
                      "unknown setting RPA_FOO: nothing reads it"]
    assert refused == ["unknown setting LEA_OCR_XYZZY: nothing reads it",
                       "unknown setting RPA_WATCHDOG_FOO: nothing reads it"]


def test_a_renamed_setting_is_refused_naming_its_new_name() -> None:
    refused, _warned = unknown_settings(["LEA_DISPATCHER_ROUTE_ENABLED"], known_settings())
    assert refused == ["setting LEA_DISPATCHER_ROUTE_ENABLED was renamed to "
                       "LEA_DISPATCHER_AGENT_ROUTES"]
