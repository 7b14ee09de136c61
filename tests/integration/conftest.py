"""Fixtures of the integration tests that not every test run needs to import, and the
history check that follows every test which ran a tree (tests/history.py)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import psycopg
import pytest

from tests.history import PROPERTIES, Verdict, judged
from tests.history_sources import judge, watch
from tests.win_desktop import win_desk  # noqa: F401 - the Windows desktop, two monitors
from tests.wine import agent_bundle, wine, wine_agent  # noqa: F401 - the Wine fixtures


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Once the test has passed, with its processes still running: its history must keep
    every property, or break exactly those its ``history_breaks`` marker names."""
    result = yield  # a test that failed (or skipped) has said enough
    w = watch(item)
    if w.trails:
        try:
            verdict = judge(w)
        except (OSError, psycopg.Error) as exc:  # a database the test stopped for good
            warnings.warn(pytest.PytestWarning(f"history not checked: {exc}"), stacklevel=1)
            return result
        item.add_report_section("call", "history", summary(verdict))
        problem = judged(verdict, expected_breaks(item))
        if problem:
            pytest.fail(problem, pytrace=False)
    return result


def expected_breaks(item: pytest.Item) -> set[str]:
    """The properties a test breaks on purpose (its ``history_breaks`` marker)."""
    names: set[str] = set()
    for mark in item.iter_markers("history_breaks"):
        if not mark.kwargs.get("reason"):
            raise pytest.UsageError(f"{item.nodeid}: history_breaks needs a reason=")
        unknown = set(mark.args) - set(PROPERTIES)
        if unknown or not mark.args:
            raise pytest.UsageError(f"{item.nodeid}: history_breaks({sorted(unknown)}): "
                                    f"name some of {', '.join(PROPERTIES)}")
        names.update(mark.args)
    return names


def summary(verdict: Verdict) -> str:
    lines = [f"{verdict.replays} replays, {verdict.inputs} inputs checked; broken: "
             f"{', '.join(sorted(verdict.broken())) or 'none'}"]
    if verdict.unjudged:
        lines.append(f"{len(verdict.unjudged)} inputs not judged (no dispatch record in the "
                     "trails read): " + "; ".join(e.describe() for e in verdict.unjudged[:5]))
    return "\n".join(lines)
