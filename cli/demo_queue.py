"""``run.py demo --queue``: a work queue of three patients on two simulated workstations of a
pool, one of which has another patient's record open, so that the identity check pauses it
(docs/queues.md).

Starts the tree and two agents of the pool ``demo`` on free ports with their own data
directory, creates the queue from ``examples/admission_queue.json``, adds
``examples/admission_queue.csv`` (as a French Excel saves it) with the ``queue`` command, and
prints each item's changes until every item has ended or waits for a person.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cli.demo import _free_endpoint, stop_all, tree_answers
from messages.queue import ListQueues, QueueReply, ShowQueue
from runtime.settings import Settings, settings_env
from transport.client import CallFailed, SyncClient

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "examples" / "admission_queue.json"
ITEMS = ROOT / "examples" / "admission_queue.csv"
# The first workstation opens the record of the patient searched; the second one shows
# another patient's record whatever is searched.
AGENTS = {"POSTE-1": "IPP {typed}", "POSTE-2": "IPP 009999"}
SETTLED = {"done", "needs_person", "business_failure", "failed", "cancelled", "skipped"}


def run(settings: Settings) -> int:
    data_dir = settings.data_dir / f"demo-queue-{time.strftime('%Y%m%d-%H%M%S')}"
    demo = settings.model_copy(update={
        "mdp_endpoint": _free_endpoint(), "bus_in_endpoint": _free_endpoint(),
        "bus_out_endpoint": _free_endpoint(), "data_dir": data_dir, "console_port": 0})
    env = {**os.environ, **settings_env(demo), "LEA_LOG_LEVEL": "WARNING"}
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"Starting the tree (data in {data_dir}) and two workstations of the pool 'demo':")
    procs = [subprocess.Popen([sys.executable, "-m", "cli", "up"], env=env, cwd=ROOT)]
    for machine, banner in AGENTS.items():
        scenario = data_dir / f"{machine}.json"
        scenario.write_text(json.dumps({"desktop": {"banner": banner},
                                        "default": {"delay_s": 0.4}}))
        shown = "the record of the patient searched" if "{typed}" in banner else \
            f"another patient's record ({banner})"
        print(f"  {machine}: shows {shown}")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "agent", "--machine-id", machine, "--pool", "demo",
             "--scenario", str(scenario), "--data-dir", str(data_dir / machine)],
            env=env, cwd=ROOT))
    client = SyncClient(demo.control_mdp_endpoint)
    try:
        if not tree_answers(client):
            return 1
        if not _pool_ready(client):
            return 1
        queue = [sys.executable, "run.py", "--data-dir", str(data_dir), "queue"]
        for args in (["create", "admissions", "--workflow", str(WORKFLOW), "--pool", "demo",
                      "--operator", "demo"],
                     ["add", "admissions", str(ITEMS), "--operator", "demo"]):
            print(f"$ python run.py queue {' '.join(args)}")
            if subprocess.run([*queue, *args], env=env, cwd=ROOT).returncode != 0:
                return 1
        return _follow(client, queue, env)
    except (CallFailed, KeyboardInterrupt) as exc:
        print(f"\nstopped: {exc or 'interrupted'}", file=sys.stderr)
        return 1
    finally:
        client.close()
        stop_all(procs)


def _pool_ready(client: SyncClient, within_s: float = 30) -> bool:
    """Wait until the dispatcher has heard both workstations say they are there
    (agent.available), so that the queue is shared between them; False if not in time."""
    deadline = time.monotonic() + within_s
    while True:
        reply = client.call("dispatcher", ListQueues()).body
        assert isinstance(reply, QueueReply)
        idle = {a["machine_id"] for a in reply.detail.get("agents", []) if a["state"] == "idle"}
        if idle >= AGENTS.keys():
            return True
        if time.monotonic() > deadline:
            print(f"error: the workstations did not come up in {within_s:g} s",
                  file=sys.stderr)
            return False
        time.sleep(0.1)


def _follow(client: SyncClient, queue: list[str], env: dict[str, str]) -> int:
    seen: dict[str, str] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        reply = client.call("dispatcher", ShowQueue(queue="admissions")).body
        assert isinstance(reply, QueueReply)
        for item in reply.items:
            if seen.get(item["reference"]) != item["state"]:
                seen[item["reference"]] = item["state"]
                why = f" ({item['reason']})" if item.get("reason") else ""
                print(f"  {item['reference']}: {item['state']}{why} on "
                      f"{item['machine_id'] or '-'}")
        if reply.items and all(s in SETTLED for s in seen.values()):
            break
        time.sleep(0.3)
    print("$ python run.py queue list")
    subprocess.run([*queue, "list"], env=env, cwd=ROOT)
    waiting = [ref for ref, state in seen.items() if state == "needs_person"]
    for ref in waiting:
        print(f"$ python run.py queue item admissions {ref}")
        subprocess.run([*queue, "item", "admissions", ref], env=env, cwd=ROOT)
    print("The identity check paused the workstation that shows another patient's record, "
          "before the note was typed; a person looks at it there, then resumes the replay, "
          "or skips or cancels the item (docs/queues.md).")
    return 0 if waiting and all(s in SETTLED for s in seen.values()) else 1
