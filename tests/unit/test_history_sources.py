"""Which spawned processes are trees and agents to the history check, and where their
trails and effects logs are (tests/history_sources.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.history_sources import ROOT, Trail, Watch, note_process, watch

PY = sys.executable


def seen(*runs: tuple[list[str], dict[str, str]]) -> Watch:
    node: Any = SimpleNamespace()
    proc: Any = SimpleNamespace(poll=lambda: None)
    for argv, env in runs:
        note_process(node, argv, env, proc)
    return watch(node)


def test_a_tree_and_its_trail_as_the_command_line_environment_and_config_say() -> None:
    w = seen(([PY, "run.py"], {"LEA_DATA_DIR": "/d/var"}),
             ([PY, "run.py", "--data-dir", "var2", "up"], {"LEA_DATA_DIR": "/d/var"}),
             (["ip", "netns", "exec", "lea-a", PY, str(ROOT / "run.py"), "--config",
               "examples/two-servers/server-a.toml"], {"LEA_DATA_DIR": "/srv/a"}))
    url = ("postgresql://lea@192.0.2.20:5432/lea?connect_timeout=2&keepalives_idle=2&"
           "keepalives_interval=1&keepalives_count=3&tcp_user_timeout=5000")
    assert list(w.trails) == [Trail(Path("/d/var")), Trail((ROOT / "var2").resolve()),
                              Trail(Path("/srv/a"), url)]
    assert w.logs == [] and w.alive()


def test_an_agent_and_its_effects_log_whichever_way_it_is_started() -> None:
    w = seen(([PY, "-m", "agent", "--machine-id", "m1", "--effects-log", "/t/a/e.jsonl"], {}),
             ([PY, "run.py", "--data-dir", "x", "agent", "--effects-log=e2.jsonl"], {}),
             ([PY, "-m", "agent", "--machine-id", "m2"], {}))  # no log: nothing to read
    assert w.logs == [Path("/t/a/e.jsonl"), (ROOT / "e2.jsonl").resolve()]
    assert list(w.trails) == []


def test_other_commands_are_no_part_of_the_history() -> None:
    w = seen(([PY, "run.py", "replay", "start", "wf.json"], {}),
             ([PY, "run.py", "actor", "dispatcher"], {}),
             ([PY, "-m", "cli.ollama_stub"], {}))
    assert (list(w.trails), w.logs) == ([], [])


def test_a_tree_whose_processes_are_gone_is_not_waited_for() -> None:
    node: Any = SimpleNamespace()
    done = subprocess.Popen([PY, "-c", "pass"])
    done.wait()
    note_process(node, [PY, "run.py"], {"LEA_DATA_DIR": "/d"}, done)
    assert not watch(node).alive()
