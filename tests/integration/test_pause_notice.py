"""The pause message on the agent (docs/screens-and-pauses.md): logged in full always, shown in a
window where a screen exists, never truncated, once per pause, closed at its end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.windows.pause_window import TITLE, notice_text, text_box_size
from messages.base import Message
from messages.pause import AgentPaused, AgentPauseEnded
from messages.replay import Ack, SafetyCheck
from tests.conftest import ROOT, Spawn, python_argv, wait_until
from tests.integration.probes import serves
from tests.xdisplay import XDisplayFactory
from transport.client import SyncClient

LONG_REASON = "\n".join(
    f"Candidat {i} : « Dossier patient — DUPONT Jean, né le 0{i % 9 + 1}/01/1950, "
    f"service de cardiologie, chambre {100 + i} » ne correspond pas à l'écran attendu."
    for i in range(40))

PAUSE = AgentPaused(
    replay_id="r-42", reason="wrong_window", message=LONG_REASON, action_id="step_7",
    safety_checks=[SafetyCheck(id="patient", label="Vérifier l'identité du patient"),
                   SafetyCheck(id="dose", label="Relire la posologie", required=False)],
    paused_at=1234.5)


# The text and its box (pure) -------------------------------------------------------------------

def test_the_notice_holds_everything_in_full() -> None:
    text = notice_text(PAUSE)
    assert LONG_REASON in text
    assert "Vérifier l'identité du patient (obligatoire)" in text
    assert "Relire la posologie" in text and "step_7" in text and "wrong_window" in text


def test_box_size_grows_with_the_text_and_scrolls_past_the_cap() -> None:
    assert text_box_size("Court.") == (40, 1, False)
    cols, rows, scroll = text_box_size("une ligne\n" * 5 + "x" * 120)
    assert (cols, rows, scroll) == (100, 7, False)
    cols, rows, scroll = text_box_size(LONG_REASON)
    assert (cols, rows, scroll) == (100, 24, True)
    assert text_box_size("a" * 210)[2]  # from 200 characters on


# The Tk window on a real X display -------------------------------------------------------------

PROBE = Path(__file__).resolve().parent.parent / "fixtures" / "pause_window_probe.py"


@pytest.mark.parametrize("message", ["Appelez le médecin avant de continuer.", LONG_REASON],
                         ids=["one_line", "forty_lines"])
def test_window_shows_the_whole_text(xdisplay: XDisplayFactory, message: str) -> None:
    display = xdisplay([(1280, 1024, 0, 0), (1920, 1080, 1280, 0)])
    pause = PAUSE.model_copy(update={"message": message})
    done = subprocess.run([sys.executable, str(PROBE)], input=pause.model_dump_json(),
                          capture_output=True, text=True, timeout=30, check=True,
                          env={**os.environ, "DISPLAY": display, "PYTHONPATH": str(ROOT)})
    facts = json.loads(done.stdout)
    assert facts["title"] == TITLE and facts["mapped"]
    assert facts["text"] == notice_text(pause)
    if facts["display_lines"] > facts["rows"]:
        assert facts["scrollbar"], "text taller than its box without a scrollbar: truncated"
        assert facts["end_reachable"]
    else:
        assert len(message) >= 200 or not facts["scrollbar"]


# Through the agent process ---------------------------------------------------------------------

def _agent(spawn: Spawn, env: dict[str, str]) -> SyncClient:
    spawn(python_argv("-m", "broker"), env=env, name="broker")
    spawn(python_argv("-m", "agent", "--machine-id", "W1"), env=env, name="agent")
    client = SyncClient(env["LEA_MDP_ENDPOINT"])
    wait_until(lambda: serves(client, "agent.W1"))
    return client


def _send(client: SyncClient, msg: Message) -> Ack:
    reply = client.call("agent.W1", msg, timeout_s=5.0).body
    assert isinstance(reply, Ack), reply
    return reply


def test_without_a_screen_the_agent_logs_the_whole_pause_once(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    lea_env.pop("DISPLAY", None)
    lea_env["LEA_PAUSE_WINDOW"] = "on"  # wanted, but there is no screen: the log
    client = _agent(spawn, lea_env)
    assert _send(client, PAUSE).status == "logged"
    assert _send(client, PAUSE).status == "already_shown"  # re-sent after a hello
    log = next(tmp_path.glob("agent-*.log"))
    text = wait_until(lambda: "Candidat 39" in (t := log.read_text()) and t, 5)
    assert isinstance(text, str)
    for line in LONG_REASON.splitlines():
        assert line in text
    assert "Vérifier l'identité du patient" in text
    assert text.count("REPLAY PAUSED r-42") == 1
    assert _send(client, AgentPauseEnded(replay_id="r-42")).status == "not_shown"
    assert _send(client, PAUSE).status == "logged"  # a new pause of that replay shows again
    client.close()


def _window_titles(display: str) -> list[str]:
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display)
    try:
        net_wm_name, utf8 = conn.intern_atom("_NET_WM_NAME"), conn.intern_atom("UTF8_STRING")
        found, todo = [], [conn.screen().root]
        while todo:
            window = todo.pop()
            name = window.get_full_property(net_wm_name, utf8)  # Tk sets it, in UTF-8
            if name is not None:
                value = name.value
                found.append(value.decode() if isinstance(value, bytes) else str(value))
            todo.extend(window.query_tree().children)
        return found
    finally:
        conn.close()


def test_with_a_screen_the_agent_opens_a_window_and_closes_it_at_the_end(
        spawn: Spawn, lea_env: dict[str, str], xdisplay: XDisplayFactory) -> None:
    lea_env["DISPLAY"] = display = xdisplay([(1280, 1024, 0, 0), (1920, 1080, 1280, 0)])
    lea_env["LEA_PAUSE_WINDOW"] = "on"  # the simulated executor shows windows only if asked
    client = _agent(spawn, lea_env)
    assert _send(client, PAUSE).status == "shown"
    wait_until(lambda: TITLE in _window_titles(display), 10)
    assert _send(client, PAUSE).status == "already_shown"
    assert _window_titles(display).count(TITLE) == 1
    assert _send(client, AgentPauseEnded(replay_id="r-42", status="resumed")).status == "closed"
    wait_until(lambda: TITLE not in _window_titles(display), 10)
    client.close()


def test_a_malformed_pause_is_refused_and_the_agent_goes_on(
        spawn: Spawn, lea_env: dict[str, str]) -> None:
    import msgpack

    from messages.codec import decode
    from messages.control import ErrorReply

    client = _agent(spawn, lea_env)
    for body in ({"replay_id": ""}, {"replay_id": "r", "message": 42},
                 {"replay_id": "r", "message": "x" * 20_001}):
        raw = msgpack.packb({"v": 1, "type": "agent.paused", "id": "x", "body": body})
        reply = decode(client.raw("agent.W1", raw, timeout_s=5.0)[-1]).body
        assert isinstance(reply, ErrorReply), body
        assert re.search("invalid|bad", reply.code)
    assert _send(client, PAUSE).status == "logged"
    client.close()
