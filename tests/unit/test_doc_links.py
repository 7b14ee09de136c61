"""Every pointer the documentation gives leads somewhere.

Read without importing anything of the project's code (ast and tokenize): the README and
docs/*.md, and the docstrings and comments of every Python file. Checked:

- a relative link leads to a file, and its ``#anchor`` to a heading of it (GitHub's slugs);
- a section cited by its title (``README, "Title"``, ``docs/x.md, "Title"``) is a heading there;
- a repository path (``actors/dispatcher/core.py``, ``tests/integration/test_wine_*.py``,
  ``docs/x.md``, ``examples/two-servers/``) exists; a bare file name (``book.py``) names a
  file somewhere in the repository;
- a name given beside a file (``agent/protocol/outbox.py: ``backoff````, ``outbox.py:backoff``,
  `` `workflow/monitors.py` `route` ``) is defined in it, and a dotted name
  (``actors.dispatcher.machine.book.ReplayBook``) is a module and the names defined in it;
- a named rule of the transport contract (``I5``, ``C1``, ``D8``) is one the table of
  docs/architecture.md defines, and nothing cites a specification the reader does not have.

Each failure names the citing file and line and what it cites, so that a moved module is
found by what still points to its old place.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

_SKIP_DIRS = {".git", "var", "node_modules", ".venv", ".pytest_cache", ".ruff_cache",
              ".benchmarks", "artifacts", "__pycache__"}
_PACKAGES = ("actors", "agent", "audit_outbox", "bench", "broker", "cli", "console", "messages",
             "runtime", "supervision", "tests", "transport", "workflow")
_TOP = (*_PACKAGES, "docs", "examples", "scripts", ".ci")

# Pointers known to lead nowhere, each "citing file: what it cites", tolerated while they
# are fixed; an entry that no longer fails must be removed, so that this list only shrinks.
KNOWN_BROKEN: frozenset[str] = frozenset()
# Dotted names that are services of the broker, not modules.
_SERVICES = frozenset({"bench.echo"})


@functools.cache
def _all_files() -> tuple[Path, ...]:
    return tuple(p for p in ROOT.rglob("*")
                 if not _SKIP_DIRS.intersection(p.relative_to(ROOT).parts) and p.is_file())


@functools.cache
def _basenames() -> frozenset[str]:
    return frozenset(p.name for p in _all_files())


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _python_files() -> list[Path]:
    return sorted(p for p in _all_files() if p.suffix == ".py")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


# --- the prose of a file: a page's lines, a Python file's docstrings and comments ----------

def _python_prose(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of each docstring and each run of comment lines."""
    source = path.read_text(encoding="utf-8")
    found: list[tuple[int, str]] = []
    run: list[str] = []
    start = last = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        if run and line != last + 1:
            found.append((start, " ".join(run)))
            run = []
        if not run:
            start = line
        run.append(tok.string.lstrip("#").strip())
        last = line
    if run:
        found.append((start, " ".join(run)))
    nodes: list[ast.AST] = [ast.parse(source)]
    while nodes:  # only where docstrings are: a module, a class, a function, and their bodies
        node = nodes.pop()
        body = getattr(node, "body", [])
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            found.append((body[0].lineno, body[0].value.value))
        nodes += [n for n in (*body, *getattr(node, "orelse", ()))
                  if isinstance(n, ast.stmt) and hasattr(n, "body")]
    return found


def _page_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each paragraph (so that a title wrapped over two lines stays whole)."""
    found: list[tuple[int, str]] = []
    run: list[str] = []
    start = 0
    for n, line in enumerate([*path.read_text(encoding="utf-8").splitlines(), ""], 1):
        if line.strip() and not line.lstrip().startswith("|"):
            if not run:
                start = n
            run.append(line.strip())
            continue
        if run:
            found.append((start, " ".join(run)))
            run = []
        if line.strip():
            found.append((n, line))
    return found


@functools.cache
def _prose() -> tuple[tuple[Path, int, str], ...]:
    found = [(page, n, text) for page in _pages() for n, text in _page_prose(page)]
    for path in _python_files():
        if path == Path(__file__):
            continue  # its examples of rot are written on purpose
        found += [(path, n, text) for n, text in _python_prose(path)]
    return tuple(found)


# --- headings and GitHub's anchors ---------------------------------------------------------

def _slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


@functools.cache
def _headings(path: Path) -> tuple[tuple[str, ...], frozenset[str]]:
    """A page's heading titles, and its anchors (a repeated slug gets -1, -2...)."""
    titles: list[str] = []
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m is None:
            continue
        title = m.group(1)
        titles.append(title)
        slug = _slug(title)
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    # A numbered rule's lead-in ("8. **Near misses.**", "7. A second look: ...") is cited as a
    # section too.
    text = path.read_text(encoding="utf-8")
    titles += re.findall(r"\*\*([^*]+)\*\*", text)
    titles += re.findall(r"^\d+\. ([^:.*\n]+)[:.]", text, re.M)
    return tuple(titles), frozenset(anchors)


def _plain(title: str) -> str:
    """A heading or a cited title without markup, for comparing the two."""
    text = re.sub(r"[`*_]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title))
    return " ".join(text.split()).rstrip(".:").lower()


# --- what resolves ------------------------------------------------------------------------

@functools.cache
def _defined(path: Path) -> frozenset[str]:
    """Every name a Python file defines: functions, classes, assignments, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None


def _dotted_problem(dotted: str) -> str | None:
    """Why ``pkg.module.Name`` does not resolve (None when it does)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        found = _module_file(parts[:cut])
        if found is not None:
            break
    else:
        return "no such module"
    rest = parts[cut:]
    if not rest:
        return None
    if found.is_dir():
        return f"no module {'.'.join(parts[:cut + 1])}"
    missing = [n for n in rest if n not in _defined(found)]
    return f"{', '.join(missing)} not defined in {_rel(found)}" if missing else None


def _path_problem(cited: str, citing: Path) -> str | None:
    """Why a repository path does not lead to a file or folder (None when it does)."""
    if any(c in cited for c in "<>{}$%") or cited.startswith("tests/artifacts/"):
        return None  # a placeholder (<data_dir>/keys), or what the tests write (git-ignored)
    if (ROOT / cited).exists():
        return None
    if "*" in cited:
        hits = [f for f in _all_files() if fnmatch.fnmatch(_rel(f), cited.rstrip("/") + "*")]
        return None if hits else "nothing matches"
    if "/" not in cited.rstrip("/"):
        if cited in _basenames() or (citing.parent / cited).exists():
            return None
        return "no file of that name in the repository"
    if (ROOT / cited).exists() or (citing.parent / cited).exists():
        return None
    return "no such file or folder"


def _files_named(cited: str, citing: Path) -> list[Path]:
    if "/" in cited:
        return [p for p in (ROOT / cited, citing.parent / cited) if p.is_file()][:1]
    near = citing.parent / cited
    return [near] if near.is_file() else [f for f in _all_files() if f.name == cited]


# --- the citations -------------------------------------------------------------------------

_EXT = r"(?:py|md|toml|json|sh|cfg|txt|ya?ml|csv|html|js|css|xml|cmd)"
_TOPS = "|".join(re.escape(t) for t in _TOP)
# A path into the repository: it starts with a top-level folder, or is a bare file name.
_PATH = re.compile(rf"(?<![\w./~-])((?:{_TOPS})/[\w*./-]*|[\w-]+\.(?:py|md))(?![\w/-])")
# A name beside a file: `file.py`: `name`, `file.py` `name`, file.py:name, file.py, ``name``.
_NAMED = re.compile(r"([\w./-]+\.py)(?:`?(?:\]\([^)]*\))?(?::\s*|\s+)`{1,2}([A-Za-z_][\w.]*\w)`"
                    r"|:([A-Za-z_]\w*))")
_DOTTED = re.compile(rf"(?<![\w./:-])((?:{'|'.join(_PACKAGES)})(?:\.[A-Za-z_]\w*)+)")
_SECTION = re.compile(r"(README|[\w./-]+\.md)[\])]*(?:\([^)]*\))?,?\s*:?\s*\"([^\"]+)\"")
_FILE_SUFFIXES = {"py", "md", "log", "args", "sqlite3", "db", "toml", "json", "cmd", "exe", "key"}
_RULE_LABEL = re.compile(r"\b([ICD]\d{1,2})\b")
_OUTSIDE_SPEC = re.compile(r"\bspec\s+\d\d\b|§")


@functools.cache
def _message_types() -> frozenset[str]:
    """The wire's type names (``agent.hello``): they look like dotted modules but are not."""
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    return frozenset(re.findall(r"`([a-z_]+\.[a-z_]+)`", text))


def _trim(cited: str) -> str:
    return cited.rstrip(".,:;")


def _problems_in(path: Path, line: int, text: str) -> Iterator[str]:
    where = f"{_rel(path)}:{line}"
    for m in _PATH.finditer(text):
        cited = _trim(m.group(1))
        if cited.endswith((".", "/.")) or not cited:
            continue
        problem = _path_problem(cited, path)
        if problem:
            yield f"{where}: cites {cited}: {problem}"
    for m in _NAMED.finditer(text):
        cited, name = m.group(1), m.group(2) or m.group(3)
        files = _files_named(cited, path)
        if not files or name.endswith((".py", ".md")):
            continue  # a missing file is said above
        missing = [n for n in name.split(".") if not any(n in _defined(f) for f in files)]
        if missing:
            yield f"{where}: cites {cited}: {name}: {', '.join(missing)} not defined there"
    for m in _DOTTED.finditer(text):
        dotted = m.group(1)
        if (dotted in _message_types() | _SERVICES
                or dotted.rsplit(".", 1)[1] in _FILE_SUFFIXES):
            continue  # a message type (agent.hello), a file (console.sqlite3)
        problem = _dotted_problem(dotted)
        if problem and dotted.count(".") == 1 and dotted.startswith("agent."):
            continue  # a workstation's service: agent.WS12
        if problem:
            yield f"{where}: cites {dotted}: {problem}"
    for m in _SECTION.finditer(text):
        page_name, title = m.group(1), m.group(2)
        page = (ROOT / "README.md" if page_name == "README" else
                next((p for p in (path.parent / page_name, ROOT / page_name,
                                  ROOT / "docs" / Path(page_name).name) if p.is_file()), None))
        if page is None:
            continue  # a missing page is said above
        titles = [_plain(t) for t in _headings(page)[0]]
        wanted = _plain(title)
        if not any(t == wanted or t.startswith(wanted) for t in titles):
            yield f"{where}: cites {page_name}, \"{title}\": no such heading there"


def _link_problems(page: Path) -> Iterator[str]:
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for m in re.finditer(r"\]\(([^)\s]+)\)", line):
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{_rel(page)}:{n}: links to {target}"
            if not dest.exists():
                yield f"{where}: no such file"
            elif anchor and dest.suffix == ".md" and anchor not in _headings(dest)[1]:
                yield f"{where}: no heading with that anchor"


def _rule_labels() -> frozenset[str]:
    """The named rules docs/architecture.md defines, in its table of them."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.partition("## The contract's named rules")[2].split("\n## ", 1)[0]
    return frozenset(re.findall(r"^\| \*\*([ICD]\d{1,2})\*\*", section, re.M))


@functools.cache
def _broken() -> list[str]:
    found = [problem for path, n, text in _prose() for problem in _problems_in(path, n, text)]
    for page in _pages():
        found += _link_problems(page)
    labels = _rule_labels()
    for path, n, text in _prose():
        for m in _RULE_LABEL.finditer(text):
            if m.group(1) not in labels:
                found.append(f"{_rel(path)}:{n}: cites rule {m.group(1)}: not in "
                             "docs/architecture.md, \"The contract's named rules\"")
        if outside := _OUTSIDE_SPEC.search(text):
            found.append(f"{_rel(path)}:{n}: cites a specification the reader does not have: "
                         f"{outside.group(0)!r}")
    return sorted(set(found))


def _key(problem: str) -> str:
    """"file: what it cites", without the line number (which moves with every edit)."""
    where, _, rest = problem.partition(": ")
    return f"{where.rsplit(':', 1)[0]}: {rest}"


def test_every_pointer_in_the_docs_and_docstrings_leads_somewhere() -> None:
    broken = [p for p in _broken() if _key(p) not in KNOWN_BROKEN]
    assert broken == [], "pointers that lead nowhere:\n" + "\n".join(broken)


def test_the_known_broken_pointers_are_still_broken() -> None:
    """An entry of KNOWN_BROKEN that resolves now is removed from it."""
    now = {_key(p) for p in _broken()}
    assert sorted(KNOWN_BROKEN - now) == []


def test_the_checker_catches_what_it_is_for(tmp_path: Path) -> None:
    """Each kind of rot, written on purpose, is found (a checker that finds nothing proves
    nothing)."""
    doc = ROOT / "docs" / "architecture.md"
    cases = {
        "cites docs/safety.md": "see docs/safety.md",
        "cites actors/dispatcher/gone.py": "in actors/dispatcher/gone.py",
        "cites agent/protocol/outbox.py: nope": "`agent/protocol/outbox.py`: `nope`",
        "cites book.py: Gone": "[`book.py`](../actors/dispatcher/machine/book.py): `Gone`",
        "cites actors.dispatcher.machine.book.Nope": "`actors.dispatcher.machine.book.Nope`",
        "cites actors.dispatcher.renamed": "actors.dispatcher.renamed.decide",
        "cites README, \"No such section\"": "README, \"No such section\"",
        "cites nothing_here.py": "``nothing_here.py``",
    }
    for expected, text in cases.items():
        assert any(expected in p for p in _problems_in(doc, 1, text)), (expected, text)
    for fine in ("`agent/protocol/outbox.py`: `backoff`",
                 "actors.dispatcher.machine.book.ReplayBook",
                 "docs/architecture.md, \"Who decides each rule\"", "`agent.hello`",
                 "tests/integration/test_wine_*.py", "book.py: `Tx`",
                 "[`book.py`](../actors/dispatcher/machine/book.py): `ReplayBook.owner`"):
        assert list(_problems_in(doc, 1, fine)) == [], fine
    page = tmp_path / "page.md"
    page.write_text("# A title, with `code`\n\n[x](#a-title-with-code) [y](#nope) [z](gone.md)\n",
                    encoding="utf-8")
    assert [p.split(": ", 1)[1] for p in _link_problems(page)] == [
        "links to #nope: no heading with that anchor", "links to gone.md: no such file"]
