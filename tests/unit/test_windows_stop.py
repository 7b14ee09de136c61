"""How the Windows agent stops: the decisions of agent/windows/console_stop.py and
agent/windows/session_end.py. Their Win32 side runs under Wine (tests/integration/
test_wine_session_end.py; Ctrl-C: test_wine_agent.py); Wine never sends a console close, so
that path is proven here only (docs/windows-stop.md)."""

from __future__ import annotations

import sys
import threading

from agent.windows.console_stop import (
    CTRL_BREAK_EVENT,
    CTRL_C_EVENT,
    CTRL_CLOSE_EVENT,
    CTRL_LOGOFF_EVENT,
    ConsoleStop,
)
from agent.windows.session_end import (
    ENDSESSION_LOGOFF,
    WM_ENDSESSION,
    WM_QUERYENDSESSION,
    SessionEnd,
    reason_of,
)


def test_the_reason_is_read_from_lparam() -> None:
    assert reason_of(ENDSESSION_LOGOFF) == "log-off"
    assert reason_of(ENDSESSION_LOGOFF | 0x1) == "log-off"  # with ENDSESSION_CLOSEAPP
    assert reason_of(0) == "shutdown"


def test_a_log_off_is_never_refused_and_only_a_real_end_stops_the_agent() -> None:
    asked: list[str] = []
    end = SessionEnd(asked.append, wait_s=5.0)
    assert end._on_message(WM_QUERYENDSESSION, 0, ENDSESSION_LOGOFF) == 1
    assert asked == []  # the session may still not end: nothing is stopped yet
    assert end._on_message(WM_ENDSESSION, 0, ENDSESSION_LOGOFF) == 0  # cancelled
    assert asked == []
    assert end._on_message(0x000F, 0, 0) is None  # anything else: DefWindowProc


def test_the_end_waits_for_the_agent_to_have_stopped() -> None:
    asked: list[str] = []
    end = SessionEnd(asked.append, wait_s=60.0)
    answered = threading.Event()

    def window_thread() -> None:
        end._on_message(WM_ENDSESSION, 1, ENDSESSION_LOGOFF)
        answered.set()

    thread = threading.Thread(target=window_thread)
    thread.start()
    try:
        while not asked:
            threading.Event().wait(0.01)
        assert asked == ["log-off"]
        assert not answered.is_set()  # Windows may end the process once it is answered
    finally:
        end.stopped()
        thread.join(10)
    assert answered.is_set()


def test_install_is_a_no_op_off_windows() -> None:
    if sys.platform != "win32":
        assert SessionEnd(lambda _reason: None, 1.0).install() is False


def test_ctrl_c_and_ctrl_break_are_left_to_python() -> None:
    asked: list[str] = []
    stop = ConsoleStop(asked.append, wait_s=5.0)
    assert stop._on_event(CTRL_C_EVENT) is False  # CPython's handler raises SIGINT
    assert stop._on_event(CTRL_BREAK_EVENT) is False
    assert asked == []


def test_a_console_close_stops_the_agent_and_waits_for_it() -> None:
    asked: list[str] = []
    stop = ConsoleStop(asked.append, wait_s=60.0)
    answer: list[bool] = []
    thread = threading.Thread(target=lambda: answer.append(stop._on_event(CTRL_CLOSE_EVENT)))
    thread.start()
    try:
        while not asked:
            threading.Event().wait(0.01)
        assert asked == ["console close"]
        assert answer == []  # the process is ended once the handler returns
    finally:
        stop.stopped()
        thread.join(10)
    assert answer == [True]
    assert stop._on_event(CTRL_LOGOFF_EVENT) is True  # after the stop: no wait left
    assert asked == ["console close", "log-off"]
