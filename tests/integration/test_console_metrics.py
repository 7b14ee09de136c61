"""The Prometheus endpoint over real HTTP, against the whole tree (``python run.py``) and a
simulated agent: a scraper with the console's token sees the numbers move through a replay
(steps, replays by state, pauses, timings, the agent connected), an actor's restart after
kill -9, the broker's word on its role and the audit backlogs; a scrape without the token is
refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from messages.replay import ReplayResumed, ResumeReplay
from supervision.tree import child_pid
from tests.conftest import Spawn, wait_until
from tests.integration.console_kit import app_in_process, console_system
from tests.integration.probes import ready_agent
from tests.integration.system import clicks, workflow

TOKEN = "a-scrape-token-for-the-tests-0123"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: httpx.Client) -> Samples:
    reply = client.get("/metrics")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(reply.text) for s in family.samples}


def seen(client: httpx.Client, check: Callable[[Samples], bool], timeout: float = 30.0
         ) -> Samples:
    """Scrape until ``check`` holds (the metrics follow the tree a little behind)."""
    found: list[Samples] = []

    def holds() -> bool:
        found[:] = [scrape(client)]
        return check(found[0])

    wait_until(holds, timeout=timeout, interval=0.2)
    return found[0]


def state(s: Samples, name: str) -> float:
    return s.get(("lea_replays", (("state", name),)), -1)


def test_a_scraper_sees_a_replay_a_restart_and_the_brokers_role(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    system, url = console_system(spawn, lea_env, tmp_path, LEA_CONSOLE_TOKEN=TOKEN)
    with httpx.Client(base_url=url, timeout=10) as anonymous:
        for headers in ({}, {"Authorization": "Bearer not-the-token"}):
            refused = anonymous.get("/metrics", headers=headers)
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"] == "login_required"
            assert "lea_" not in refused.text

    scraper = httpx.Client(base_url=url, timeout=10,
                           headers={"Authorization": f"Bearer {TOKEN}"})
    with scraper:
        # The console has had the dispatcher's whole list (the steps' baseline): steps of
        # the replay below are all counted.
        wait_until(lambda: scraper.get("/api/health").json()["dispatcher"] == "ok",
                   timeout=20, interval=0.1)
        first = scrape(scraper)
        assert first[("lea_steps_completed_total", ())] == 0
        assert state(first, "running") == 0

        ready_agent(system, "M1")
        pause = {"type": "pause_for_human", "parameters": {"message": "Vérifiez"}}
        wait = {"type": "wait", "parameters": {"duration_ms": 10}}
        replay_id = system.start(workflow(*clicks(3), pause, wait, wait), "M1")

        # At the pause: one replay paused, its three clicks counted, the pause by reason,
        # the clicks timed, the agent connected with its heartbeats.
        paused = seen(scraper, lambda s: state(s, "paused_need_help") == 1
                      and s[("lea_steps_completed_total", ())] == 3
                      and ("lea_agent_connected", (("machine_id", "M1"),)) in s)
        assert state(paused, "running") == 0
        reason = system.status(replay_id).pause_reason
        assert reason  # the dispatcher's word for why, the label of the pause counted
        assert paused[("lea_pauses_total", (("reason", reason),))] == 1
        clicks_timed = ("lea_action_duration_seconds_count", (("action_type", "click"),))
        assert paused[clicks_timed] == 3
        assert paused[("lea_step_overhead_seconds_count", ())] >= 2  # click → next click
        assert paused[("lea_agent_connected", (("machine_id", "M1"),))] == 1
        heartbeat = ("lea_agent_last_heartbeat_timestamp_seconds", (("machine_id", "M1"),))
        assert seen(scraper, lambda s: heartbeat in s)[heartbeat] > 0

        reply = system.call("dispatcher", ResumeReplay(replay_id=replay_id))
        assert isinstance(reply, ReplayResumed), reply
        system.wait_status(replay_id, "completed", timeout=30)
        total = system.status(replay_id).completed_actions
        done = seen(scraper, lambda s: state(s, "completed") == 1
                    and s[("lea_steps_completed_total", ())] == total)
        assert state(done, "paused_need_help") == 0 and total == 6

        # kill -9 of an actor: the supervisor restarts it, the scrape counts it.
        killed = system.kill("loop_detector")
        wait_until(lambda: child_pid(system.tree.pid, "loop_detector") not in (None, killed),
                   timeout=20)
        restarts = ("lea_actor_restarts_total", (("actor", "loop_detector"),))
        assert seen(scraper, lambda s: s.get(restarts) == 1)[restarts] == 1

        # The broker's own word (a broker alone is active), and each sender's audit backlog.
        endpoint = lea_env["LEA_MDP_ENDPOINT"]
        told = seen(scraper, lambda s: ("lea_broker_up", (("endpoint", endpoint),)) in s
                    and {"dispatcher", "supervisor", "console"} <= {
            dict(labels)["sender"] for (name, labels) in s if name == "lea_audit_backlog"})
        assert told[("lea_broker_up", (("endpoint", endpoint),))] == 1
        broker = (("configured", "alone"), ("endpoint", endpoint))
        assert told[("lea_broker_role", (*broker, ("role", "active")))] == 1
        assert told[("lea_broker_role", (*broker, ("role", "backup")))] == 0
        assert all(v >= 0 for (name, _), v in told.items() if name == "lea_audit_backlog")
        assert told[("lea_actor_restarts_total", (("actor", "broker"),))] == 0

        # kill -9 of the broker: its restart's event dies with it, the supervisor's count
        # does not; and the broker answers again.
        killed = system.kill("broker")
        wait_until(lambda: child_pid(system.tree.pid, "broker") not in (None, killed),
                   timeout=20)
        back = seen(scraper, lambda s: s.get(("lea_actor_restarts_total",
                                              (("actor", "broker"),))) == 1
                    and s.get(("lea_broker_up", (("endpoint", endpoint),))) == 1)
        assert back[("lea_actor_restarts_total", (("actor", "loop_detector"),))] == 1


def test_without_a_token_metrics_are_for_this_machine_and_a_person_only(
        tmp_path: Path) -> None:
    """In process (nothing listens, no request leaves): /metrics keeps the console's rules."""
    with app_in_process(tmp_path) as app:
        remote = TestClient(app, client=("192.0.2.7", 40000), base_url="http://192.0.2.1:8765")
        denied = remote.get("/metrics")
        assert denied.status_code == 403 and denied.json()["error"] == "loopback_only"
        local = TestClient(app, client=("127.0.0.1", 40000), base_url="http://127.0.0.1:8765")
        anonymous = local.get("/metrics", headers={"Authorization": "Bearer anything-at-all"})
        assert anonymous.status_code == 401 and anonymous.json()["error"] == "login_required"
