"""The supervisor's audit records with the real tree (``python run.py``): each start, exit
and restart reaches the trail even when it happens while the broker or audit_log is down, and
what a stopped tree could not send is sent at its next start, once."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from audit_outbox.store import AuditOutbox
from tests.conftest import Spawn, python_argv, wait_until
from tests.integration import trail_checks as trail
from tests.integration.system import System


def supervisor_records(env: dict[str, str]) -> list[dict[str, Any]]:
    return [r for r in trail.export_all(env) if r["source"] == "supervisor"]


def drained(data_dir: Path) -> bool:
    return not trail.outbox_rows(data_dir, "supervisor")


def of(records: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == kind and r["data"].get("name") == name]


def test_restarts_while_the_broker_and_audit_log_are_down_reach_the_trail(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system = System(spawn, lea_env, tmp_path)
    data_dir = Path(system.env["LEA_DATA_DIR"])
    broker = system.kill("broker")
    audit_log = system.kill("audit_log")  # both down: nowhere to send anything
    watchdog = system.kill("watchdog")
    wait_until(lambda: system.pid("watchdog") not in (None, watchdog), timeout=30)
    wait_until(lambda: drained(data_dir), timeout=60, interval=0.2)

    records = supervisor_records(system.env)
    for name, pid in (("broker", broker), ("audit_log", audit_log), ("watchdog", watchdog)):
        (exited,) = of(records, "actor_exited", name)
        assert exited["data"] == {"name": name, "pid": pid, "exit_code": None,
                                  "signal": "SIGKILL", "reason": "signal"}
        (restarted,) = of(records, "actor_restarted", name)
        assert restarted["data"]["previous_pid"] == pid
        assert restarted["data"]["restarts"] == 1 and restarted["data"]["why"]
        assert len(of(records, "actor_started", name)) == 2
    assert [r["kind"] for r in records].count("tree_started") == 1
    trail.assert_rows_complete(records, "supervisor", trail.store_id(data_dir, "supervisor"))
    assert system.tree.poll() is None  # it supervised all along


def test_a_tree_stopped_by_its_restart_intensity_says_so_at_its_next_start(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    """The records of the stop cannot reach audit_log (stopped with the tree): they wait in
    the outbox, and the next tree on the same data directory sends them."""
    system = System(spawn, lea_env, tmp_path, extra_env={"LEA_RESTART_INTENSITY": "0"})
    data_dir = Path(system.env["LEA_DATA_DIR"])
    wait_until(lambda: drained(data_dir), timeout=30, interval=0.2)
    victim = system.kill("monitor_router")
    assert system.tree.wait(timeout=60) == 1
    outbox = AuditOutbox.in_dir(data_dir)
    left = [record for _row, record in outbox.pending(0, 100)]
    outbox.close()
    stopped = [r for r in left if r.kind == "tree_stopped"]
    assert [r.data["reason"] for r in stopped] == ["restart_intensity"]
    assert {"monitor_router"} <= {r.data["name"] for r in left if r.kind == "actor_exited"}

    again = spawn(python_argv("run.py"), env=system.env, name="tree-again")
    wait_until(lambda: drained(data_dir), timeout=60, interval=0.2)
    records = supervisor_records(system.env)
    (stop,) = [r for r in records if r["kind"] == "tree_stopped"]
    assert stop["record_id"] == left[[r.kind for r in left].index("tree_stopped")].record_id
    assert stop["data"]["max_restarts"] == 0 and "monitor_router" in stop["data"]["why"]
    (killed,) = [r for r in of(records, "actor_exited", "monitor_router")
                 if r["data"]["pid"] == victim]
    assert killed["data"]["signal"] == "SIGKILL"
    assert [r["kind"] for r in records].count("tree_started") == 2
    trail.assert_rows_complete(records, "supervisor", trail.store_id(data_dir, "supervisor"))
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=60) == 0
