"""Two servers for real (docs/two-servers.md, "Running on two servers"), built by
tests/integration/two_servers.py from the example files: in the middle of replays server A's
link goes down; work resumes through server B, every replay completes, every input is
performed exactly once. Then A's link comes back: A does not take over while B serves, both
trees keep running, new replays complete, and the audit trail verifies on each server.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Spawn, wait_until
from tests.integration.broker_pair import PairWatch
from tests.integration.system import clicks, workflow
from tests.integration.two_servers import effects, two_servers

AGENTS = 3
STEPS = 60


def test_server_a_cut_off_during_replays(spawn: Spawn, tmp_path: Path) -> None:
    with two_servers(spawn, tmp_path) as servers:
        made, ws = servers.made, servers.ws
        a, b = ws.brokers
        watch = ws.on.run(lambda: PairWatch(a, b))
        try:
            agents = {f"w{i}": ws.agent(f"w{i}") for i in range(AGENTS)}
            for machine_id in agents:
                ws.wait_ready(machine_id)
            wf = workflow(*clicks(STEPS))
            replays = {m: ws.start(wf, m) for m in agents}

            def done_at_least(n: int) -> bool:
                return all(len(effects(f)) >= min(n, STEPS) for f in agents.values())

            # Server A's cable is pulled mid-replay: B takes over, the work goes on there.
            wait_until(lambda: done_at_least(5), timeout=60)
            made.cut("a")
            wait_until(lambda: ws.state(b) == "active", timeout=30)
            progress = min(len(effects(f)) for f in agents.values())
            wait_until(lambda: done_at_least(progress + 5), timeout=60)
            for replay_id in replays.values():
                ws.wait_completed(replay_id, timeout=120)
            expected = [action.action_id for action in wf.actions]
            for machine_id, folder in agents.items():
                assert effects(folder) == expected, f"not exactly once on {machine_id}"

            # A's cable is back: it hears B serving and stays passive; both trees run on.
            made.mend("a")
            wait_until(lambda: ws.said(a).get("peer_state") == "active", timeout=30)
            assert ws.state(a) == "passive" and ws.state(b) == "active"
            again = workflow(*clicks(10), workflow_id="after")
            more = {m: ws.start(again, m) for m in agents}
            for replay_id in more.values():
                ws.wait_completed(replay_id, timeout=60)
            assert ws.state(a) == "passive" and ws.state(b) == "active"
            after = expected + [action.action_id for action in again.actions]
            for machine_id, folder in agents.items():
                assert effects(folder) == after, f"not exactly once on {machine_id} at the end"
            assert all(tree.poll() is None for tree in servers.trees.values()), "a tree stopped"
            # The audit trail both servers wrote in PostgreSQL verifies from each (the chain
            # there, and that server's own anchor in its data folder).
            for host in servers.trees:
                done = servers.run(host, "audit", "verify")
                assert done.returncode == 0, done.stdout + done.stderr
        finally:
            watch.close()
    assert watch.both == [], f"two active brokers: {watch.both[:3]}"
    assert "active" in watch.seen[a] and "active" in watch.seen[b], watch.seen
