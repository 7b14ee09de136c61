"""What ``python -m agent status`` says from the agent's status file (agent/status.py, pure)."""

from __future__ import annotations

from pathlib import Path

from agent.status import NO_LINK, NOT_RUNNING, RUNNING, describe

NOW = 1_800_000_000.0
STATUS = {
    "service": "agent.WS12", "pid": 4242, "started_at": NOW - 3600, "executor": "desktop",
    "updated_at": NOW - 2, "log_file": r"C:\Users\n\AppData\Local\Lea\agent\logs\agent.log",
    "link": {"endpoint": "tcp://127.0.0.1:50123", "endpoints": ["tcp://127.0.0.1:50123"],
             "transport": "curve", "broker_heard": True, "hello_answered_at": NOW - 3500,
             "router_answering": True},
    "monitors": [{"idx": 0, "x": 0, "y": 0, "w": 1920, "h": 1080, "primary": True,
                  "name": r"\\.\DISPLAY1"}],
    "last_action": {"replay_id": "r1", "action_id": "s3", "type": "click", "at": NOW - 60,
                    "outcome": "failed (wrong_window)"},
}
DATA = Path("data")


def test_a_running_linked_agent_says_so_with_its_monitors_and_last_action() -> None:
    code, lines = describe(STATUS, True, NOW, DATA)
    text = "\n".join(lines)
    assert code == RUNNING
    assert "agent.WS12: running (pid 4242" in text and "connected to tcp://" in text
    assert "0: 1920x1080 at (0, 0) primary" in text
    assert "last action: s3 (click) of replay r1: failed (wrong_window)" in text


def test_no_broker_heard_or_a_stale_status_is_not_running_well() -> None:
    unlinked = {**STATUS, "link": {**STATUS["link"], "broker_heard": False}}
    assert describe(unlinked, True, NOW, DATA)[0] == NO_LINK
    code, lines = describe(STATUS, True, NOW + 600, DATA)
    assert code == NO_LINK and any("may be stuck" in line for line in lines)


def test_a_gone_process_or_no_status_is_not_running() -> None:
    assert describe(STATUS, False, NOW, DATA)[0] == NOT_RUNNING
    code, lines = describe(None, False, NOW, DATA)
    assert code == NOT_RUNNING and "not running" in lines[0]


def test_on_windows_the_display_scaling_is_said() -> None:
    line = ("display scaling: per-monitor DPI aware (SetProcessDpiAwarenessContext("
            "PER_MONITOR_AWARE_V2) succeeded); monitors: 1920x1080 at (0, 0) 150 %")
    _code, lines = describe({**STATUS, "display_scaling": line}, True, NOW, DATA)
    assert line in lines
    assert not any("display scaling" in line for line in describe(STATUS, True, NOW, DATA)[1])
