"""Work queues through the whole system (docs/queues.md): the tree (``python run.py``), the
``queue`` commands, simulated agent processes of pools, on SQLite and on PostgreSQL.

- a queue is served by the agents of its pool only, one item per agent at a time, and every
  item ends ``done`` with each of its inputs performed once;
- kill -9 of the dispatcher and of an agent mid-item: an item whose agent died before its
  first input is tried again on another agent of the pool and done; no input of any item is
  ever performed twice, whatever its replays.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from messages.queue import ListQueues, QueueReply, ShowQueue
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration.probes import Tap
from tests.integration.system import Agent, System
from tests.integration.transport_checks import wait_ready

Env = dict[str, str]
FINAL = {"done", "cancelled", "skipped", "failed", "business_failure", "needs_person"}
INPUT_STEPS = ("type_ipp", "save")


def queue_workflow(path: Path, open_ms: int = 300) -> Path:
    """Open the patient's record (an observation that takes ``open_ms``), type the IPP, save."""
    path.write_text(json.dumps({
        "workflow_id": "admission", "inputs": [{"name": "ipp", "pattern": r"\d{6}"}],
        "actions": [
            {"action_id": "open_record", "type": "verify_screen",
             "parameters": {"duration_ms": open_ms}},
            {"action_id": "type_ipp", "type": "type",
             "target_spec": {"x_pct": 0.3, "y_pct": 0.2}, "parameters": {"text": "{{ipp}}"}},
            {"action_id": "save", "type": "click", "target_spec": {"x_pct": 0.6, "y_pct": 0.8}},
        ]}))
    return path


def french_csv(path: Path, n: int) -> Path:
    """As Excel saves it in a French locale: ``;``, Windows-1252, dates JJ/MM/AAAA."""
    rows = ["reference;ipp;priority;deadline"]
    rows += [f"adm-{i:03d}é;{100000 + i};{'haute' if i % 3 == 0 else 'normale'};31/12/2099"
             for i in range(n)]
    path.write_bytes(("\r\n".join(rows) + "\r\n").encode("cp1252"))
    return path


def cli(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(python_argv("run.py", "queue", *args), env=env, text=True,
                          capture_output=True, timeout=120)


def items(system: System, queue: str) -> list[dict[str, Any]]:
    reply = system.call("dispatcher", ShowQueue(queue=queue, limit=100_000), timeout_s=10)
    assert isinstance(reply, QueueReply), reply
    return reply.items


def agents(system: System) -> dict[str, str]:
    reply = system.call("dispatcher", ListQueues(), timeout_s=10)
    assert isinstance(reply, QueueReply), reply
    return {a["machine_id"]: a["state"] for a in reply.detail["agents"]}


def make_queue(system: System, env: Env, tmp: Path, n: int, open_ms: int = 300) -> None:
    made = cli(env, "create", "admissions", "--workflow",
               str(queue_workflow(tmp / "wf.json", open_ms)), "--pool", "ward",
               "--operator", "ide")
    assert made.returncode == 0, made.stderr
    added = cli(env, "add", "admissions", str(french_csv(tmp / "adm.csv", n)))
    assert added.returncode == 0, added.stderr
    assert f"{n} item(s) added" in added.stdout


def assert_each_item_once(system: System, pool: list[Agent], queue: str) -> None:
    """No input step of an item performed twice, over every replay the item had and every
    agent; a ``done`` item had each of its inputs performed exactly once."""
    effects = [e for a in pool for e in a.effects()]
    for item in items(system, queue):
        replays = {h["replay_id"] for h in item["history"] if h["replay_id"]}
        steps = Counter(e["action_id"].split("_resume")[0] for e in effects
                        if e["replay_id"] in replays)
        assert all(c <= 1 for c in steps.values()), (item["reference"], steps)
        if item["state"] == "done":
            assert all(steps[s] == 1 for s in INPUT_STEPS), (item["reference"], steps)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_env(request: pytest.FixtureRequest) -> Env:
    if request.param == "sqlite":
        return {}
    url: str = request.getfixturevalue("pg_url")
    return {"LEA_DATABASE_URL": url}


def test_a_queue_is_served_by_the_agents_of_its_pool_each_item_once(
        spawn: Spawn, lea_env: Env, tmp_path: Path, store_env: Env) -> None:
    system = System(spawn, lea_env, tmp_path, store_env)
    env = system.env
    ward = [system.agent(m, {"default": {"delay_s": 0.05}}, extra_args=["--pool", "ward"])
            for m in ("w1", "w2")]
    other = system.agent("o1", {"default": {"delay_s": 0.05}}, extra_args=["--pool", "other"])
    for a in [*ward, other]:
        wait_ready(system, a)
    wait_until(lambda: set(agents(system)) == {"w1", "w2", "o1"}, timeout=20)
    make_queue(system, env, tmp_path, 8)
    wait_until(lambda: all(i["state"] == "done" for i in items(system, "admissions")),
               timeout=120)
    done = items(system, "admissions")
    assert len(done) == 8
    assert {i["machine_id"] for i in done} == {"w1", "w2"}  # both, and only the pool's
    assert other.effects() == []
    assert all(i["attempts"] == 1 for i in done)
    assert_each_item_once(system, ward, "admissions")
    # One item at a time per agent: its replays never overlap in time.
    for a in ward:
        spans = sorted((min(e["at"] for e in es), max(e["at"] for e in es)) for es in
                       _by_replay(a).values())
        assert all(nxt[0] > prev[1] for prev, nxt in pairwise(spans)), spans
    # A reference is refused a second time, whatever the first one's state.
    again = cli(env, "add", "admissions", str(french_csv(tmp_path / "again.csv", 1)))
    assert again.returncode == 1
    assert "adm-000é" in again.stderr and "already in the queue (done)" in again.stderr
    assert len(items(system, "admissions")) == 8
    # A file with one bad row among good ones adds nothing, and names the row.
    (tmp_path / "bad.csv").write_bytes("reference;ipp\r\nnew-1;200001\r\nnew-2;2000\r\n"
                                       "new-3;200003\r\n".encode("cp1252"))
    bad = cli(env, "add", "admissions", str(tmp_path / "bad.csv"))
    assert bad.returncode == 1 and "nothing was added" in bad.stderr
    assert "row 2 (line 3) new-2: ipp: '2000' does not match" in bad.stderr
    assert len(items(system, "admissions")) == 8
    # The export opens in a French spreadsheet and runs nothing.
    exported = subprocess.run(python_argv("run.py", "queue", "export", "admissions"), env=env,
                              capture_output=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.decode("utf-8-sig").splitlines()
    assert lines[0].startswith("reference;state;reason;priority") and len(lines) == 9
    assert all(";done;" in line for line in lines[1:])


def _by_replay(agent: Agent) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in agent.effects():
        out.setdefault(e["replay_id"], []).append(e)
    return out


def test_kill_9_of_the_dispatcher_and_of_an_agent_mid_items(
        spawn: Spawn, lea_env: Env, tmp_path: Path, store_env: Env) -> None:
    system = System(spawn, lea_env, tmp_path, store_env)
    pool = [system.agent(m, {"default": {"delay_s": 0.05}}, extra_args=["--pool", "ward"])
            for m in ("k1", "k2", "k3")]
    for a in pool:
        wait_ready(system, a)
    wait_until(lambda: len(agents(system)) == 3, timeout=20)
    make_queue(system, system.env, tmp_path, 9, open_ms=2500)
    wait_until(lambda: sum(i["state"] == "done" for i in items(system, "admissions")) >= 1,
               timeout=60)
    system.kill("dispatcher")
    # Back, it has every item where it was, and the pool goes on.
    wait_until(lambda: system.pid("dispatcher"), timeout=30)

    def opening_on_k3() -> dict[str, Any] | None:
        return next((i for i in items(system, "admissions") if i["state"] == "in_progress"
                     and i["machine_id"] == "k3"
                     and system.status(i["replay_id"]).current_action_id == "open_record"),
                    None)

    victim = wait_until(opening_on_k3, timeout=60)
    assert isinstance(victim, dict)
    pool[2].kill()  # before the item's first input: tried again on k1 or k2
    wait_until(lambda: all(i["state"] in FINAL for i in items(system, "admissions")),
               timeout=180)
    final = {i["reference"]: i for i in items(system, "admissions")}
    retried = final[victim["reference"]]
    assert retried["state"] == "done", retried
    assert retried["attempts"] == 2 and retried["machine_id"] in ("k1", "k2")
    assert [h["state"] for h in retried["history"]].count("system_failure") == 1
    assert all(i["state"] == "done" for i in final.values()), final
    assert_each_item_once(system, pool, "admissions")


def test_an_agent_lost_after_an_input_leaves_its_item_to_a_person(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """The agent dies right after typing the IPP: the item is never run again from the
    start; it waits for a person (``needs_person``), who skips it (done by hand)."""
    system = System(spawn, lea_env, tmp_path)
    crashing = system.agent("c1", {"actions": {"type_ipp": {"crash": "after"}},
                                   "default": {"delay_s": 0.05}},
                            extra_args=["--pool", "ward"])
    wait_ready(system, crashing)
    wait_until(lambda: len(agents(system)) == 1, timeout=20)
    make_queue(system, system.env, tmp_path, 3)
    wait_until(lambda: crashing.proc is not None and crashing.proc.poll() is not None,
               timeout=60)
    healthy = system.agent("c2", {"default": {"delay_s": 0.05}}, extra_args=["--pool", "ward"])
    wait_until(lambda: all(i["state"] in FINAL for i in items(system, "admissions")),
               timeout=120)
    final = items(system, "admissions")
    waiting = [i for i in final if i["state"] == "needs_person"]
    assert len(waiting) == 1, final
    item = waiting[0]
    assert item["machine_id"] == "c1" and item["attempts"] == 1
    assert item["reason"] == "orphan_max_resends"
    assert [i["state"] for i in final if i is not item] == ["done", "done"]
    assert system.status(item["replay_id"]).status == "paused_need_help"  # what was done
    assert agents(system)["c1"] == "offline"
    assert_each_item_once(system, [crashing, healthy], "admissions")
    skipped = cli(system.env, "skip", "admissions", item["reference"], "--operator", "ide")
    assert skipped.returncode == 0, skipped.stderr
    assert "skipped" in skipped.stdout
    assert system.status(item["replay_id"]).status == "failed"  # its replay ended
    shown = cli(system.env, "item", "admissions", item["reference"])
    assert "skip by ide" in shown.stdout and "needs_person" in shown.stdout
    # The item's inputs were shown: the view is in the trail, under the proven OS user.
    access = subprocess.run(python_argv("run.py", "audit", "access", "--item",
                                        f"admissions/{item['reference']}", "--json"),
                            env=system.env, text=True, capture_output=True, timeout=60)
    assert access.returncode == 0, access.stderr
    seen = [json.loads(line) for line in access.stdout.splitlines() if line.strip()]
    assert [(v["what"], v["os_user"]) for v in seen] == [("queue_item", getpass.getuser())]


def test_items_that_cannot_start_before_their_deadline_are_said_at_risk(
        spawn: Spawn, lea_env: Env, tmp_path: Path) -> None:
    """One agent, items of about 1.5 s: once a duration is measured, the items whose turn
    comes after their deadline are marked at risk, each once, with a ``lea:`` event; those
    that can still make it are not."""
    system = System(spawn, lea_env, tmp_path)
    agent = system.agent("d1", {"default": {"delay_s": 0.05}}, extra_args=["--pool", "ward"])
    wait_ready(system, agent)
    wait_until(lambda: len(agents(system)) == 1, timeout=20)
    made = cli(system.env, "create", "admissions", "--workflow",
               str(queue_workflow(tmp_path / "wf.json", 1500)), "--pool", "ward")
    assert made.returncode == 0, made.stderr
    first = tmp_path / "first.csv"
    first.write_text("reference;ipp\nmeasure;100000\n")
    assert cli(system.env, "add", "admissions", str(first)).returncode == 0
    wait_until(lambda: items(system, "admissions")[0]["state"] == "done", timeout=60)
    soon = time.time() + 6  # room for about three items, one after the other
    rows = ["reference;ipp;deadline"] + [f"late-{i};{100001 + i};{soon:.0f}" for i in range(6)]
    rows.append("roomy;100009;31/12/2099")
    (tmp_path / "late.csv").write_text("\n".join(rows) + "\n")
    tap = Tap(system, "lea:queue_item_at_risk")
    try:
        added = cli(system.env, "add", "admissions", str(tmp_path / "late.csv"))
        assert added.returncode == 0, added.stderr
        wait_until(lambda: sum(i["at_risk"] for i in items(system, "admissions")) >= 2,
                   timeout=30)
        at_risk = {i["reference"] for i in items(system, "admissions") if i["at_risk"]}
        assert "roomy" not in at_risk and "measure" not in at_risk
        assert "late-5" in at_risk and "late-0" not in at_risk  # the first in line makes it
        said = wait_until(lambda: [e for e in tap.events() if e.data["queue"] == "admissions"],
                          timeout=10)
        assert isinstance(said, list)
        assert {e.data["reference"] for e in said} <= at_risk
    finally:
        tap.close()
    listed = cli(system.env, "list")
    assert "at risk" in listed.stdout
