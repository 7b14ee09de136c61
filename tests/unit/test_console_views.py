"""The console's pure parts: from where it may be called, what a pause dialog shows from the
dispatcher's summary and the audit trail, the live list, and the stream fan-out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from console import access
from console.board import Board
from console.bus_feed import STREAM_QUEUE, Hub
from console.views import pause_view, row, timeline_entry
from messages.audit import AuditRecordOut
from messages.events import Event
from messages.replay import ReplaySummary, SafetyCheck
from runtime.settings import Settings

TOKEN = "0123456789abcdef-token"


def summary(**fields: Any) -> ReplaySummary:
    base: dict[str, Any] = {
        "replay_id": "r1", "session_id": "s1", "machine_id": "M1", "workflow_id": "wf",
        "mode": "supervised", "status": "running", "index": 2, "total": 5,
        "completed_actions": 2, "created_at": 100.0, "updated_at": 101.0}
    return ReplaySummary.model_validate({**base, **fields})


def record(seq: int, kind: str, data: dict[str, Any] | None = None,
           shots: dict[str, str] | None = None,
           states: dict[str, str] | None = None) -> AuditRecordOut:
    return AuditRecordOut.model_validate({
        "seq": seq, "record_id": f"d:{seq}", "source": "dispatcher", "kind": kind,
        "replay_id": "r1", "at": 100.0 + seq, "stored_at": 100.0 + seq, "data": data or {},
        "screenshots": shots or {}, "screenshot_state": states or {},
        "prev_hash": "0" * 64, "hash": "1" * 64})


# Access -------------------------------------------------------------------------------------

LOCAL = access.Network(open=False, names=frozenset())


@pytest.mark.parametrize(("client", "host", "code"), [
    ("127.0.0.1", "127.0.0.1:8765", None),
    ("127.0.0.5", "localhost:8765", None),
    ("::1", "[::1]:8765", None),
    ("192.0.2.7", "127.0.0.1:8765", "loopback_only"),
    (None, "127.0.0.1:8765", "loopback_only"),
    ("127.0.0.1", "evil.example:8765", "host_not_allowed"),
    ("127.0.0.1", None, "host_not_allowed"),
])
def test_on_loopback_only_loopback_by_a_loopback_name(client: str | None, host: str | None,
                                                       code: str | None) -> None:
    denied = access.network_denied(LOCAL, client, host)
    assert (denied.code if denied else None) == code


def test_beyond_loopback_any_address_may_come_by_one_of_the_consoles_names() -> None:
    settings = Settings(console_host="0.0.0.0", console_token=TOKEN,
                        console_server_names="Lea.Hospital.example, lea")
    network = access.network_of(settings, frozenset({"lea-console.hospital.example",
                                                     "192.0.2.1"}))
    assert network.open
    for client in ("127.0.0.1", "192.0.2.7"):
        for host in ("127.0.0.1:8765", "lea.hospital.example", "LEA:8443",
                     "lea-console.hospital.example.", "192.0.2.1:8765"):
            assert access.network_denied(network, client, host) is None, host
        # DNS rebinding: a page of another site whose name now leads here.
        for host in ("evil.example", "hospital.example", "", None):
            denied = access.network_denied(network, client, host)
            assert denied is not None and denied.code == "host_not_allowed"
    # The address it listens on is one of its names; "every address" is none.
    assert "10.1.2.3" in access.server_names(Settings(console_host="10.1.2.3"), frozenset())
    assert access.server_names(Settings(console_host="0.0.0.0"), frozenset()) == frozenset()


def test_with_a_token_a_person_or_the_token_is_needed() -> None:
    assert access.token_matches(TOKEN, TOKEN)
    assert not access.token_matches(TOKEN, TOKEN[:-1])
    assert not access.token_matches(TOKEN, None)
    for state, status, code in (("unknown", 401, "login_required"),
                                ("ended", 401, "login_required"),
                                ("expired", 401, "session_expired"),
                                ("account_disabled", 403, "account_disabled")):
        denied = access.person_denied(state)
        assert (denied.status, denied.code) == (status, code)


BEYOND = {"console_host": "0.0.0.0", "console_token": TOKEN}


@pytest.mark.parametrize(("fields", "problem"), [
    ({}, None),
    ({"console_token": "short"}, "at least 16"),
    ({"console_token": f" {TOKEN}"}, "spaces"),
    ({"console_host": "0.0.0.0"}, "no access token"),
    (BEYOND, "in clear"),
    ({**BEYOND, "console_tls_cert": "c.pem", "console_tls_key": "k.pem"}, None),
    ({**BEYOND, "console_behind_tls_proxy": True}, "LEA_CONSOLE_SERVER_NAMES"),
    ({**BEYOND, "console_behind_tls_proxy": True, "console_server_names": "lea.example"}, None),
    ({"console_behind_tls_proxy": True, "console_server_names": "lea.example",
      "console_tls_cert": "c.pem", "console_tls_key": "k.pem"}, "choose one"),
    ({"console_host": "0.0.0.0", "console_port": 0}, None),
    ({"console_host": "localhost"}, None),
])
def test_config_problems_are_said_before_starting(fields: dict[str, Any],
                                                  problem: str | None) -> None:
    found = access.config_problem(Settings(**fields))
    assert (found is None) if problem is None else (found is not None and problem in found)


# The pause dialog ---------------------------------------------------------------------------

LOOP_MESSAGE = "Léa semble bloquée — action_repeat (count=3, action=click, screen_changed=no)"


def loop_summary() -> ReplaySummary:
    return summary(status="paused_need_help", pause_reason="loop_detected",
                   pause_message=LOOP_MESSAGE)


def test_a_loop_pause_shows_its_signal_evidence_in_reading_order_and_the_last_screen() -> None:
    paused = record(7, "replay_paused", {
        "reason": "loop_detected", "message": LOOP_MESSAGE, "action_id": "s2",
        "detail": {"signal": "action_repeat", "evidence": {
            "action": "click", "count": 3, "screen_changed": "no", "other": True}}})
    trail = [record(1, "replay_started"),
             record(4, "report_received", shots={"before": "b" * 64, "after": "a" * 64}),
             record(5, "report_received", shots={"after": "c" * 64},
                    states={"after": "pruned"}),
             paused,
             record(9, "report_received", shots={"after": "d" * 64})]  # after the pause
    view = pause_view(loop_summary(), trail)
    assert view is not None and not view.detail_pending
    assert view.action_id == "s2" and view.paused_at == paused.at
    assert view.loop is not None and view.loop.signal_label.startswith("La même action")
    assert [(e.key, e.value) for e in view.loop.evidence] == [
        ("count", "3"), ("action", "click"), ("screen_changed", "non"), ("other", "oui")]
    assert view.screenshot is not None and view.screenshot.sha256 == "a" * 64  # pruned skipped
    assert view.screenshot.url == f"/api/screenshots/{'a' * 64}"
    assert view.checks == [] and view.required_ids == []


@pytest.mark.parametrize("trail", [
    [],  # the trail has not caught up yet
    [record(3, "replay_paused", {"reason": "loop_detected", "message": LOOP_MESSAGE}),
     record(4, "replay_resumed")],  # the resume of an earlier pause is the latest known
    [record(3, "replay_paused", {"reason": "loop_detected", "message": "another pause"})],
])
def test_a_pause_the_trail_does_not_show_yet_is_pending(trail: list[AuditRecordOut]) -> None:
    view = pause_view(loop_summary(), trail)
    assert view is not None and view.detail_pending and view.loop is None
    assert view.message == LOOP_MESSAGE  # the dialog works from the summary meanwhile


def test_checks_keep_their_order_required_ids_and_source_labels() -> None:
    checks = [SafetyCheck(id="a", label="A"), SafetyCheck(id="l1", label="L", required=False,
                                                          source="llm_contextual",
                                                          evidence="vu à l'écran"),
              SafetyCheck(id="sys", label="S", source="system")]
    view = pause_view(summary(status="paused_need_help", pause_reason="user_request",
                              pause_message="Vérifiez", safety_checks=checks), [])
    assert view is not None
    assert [(c.id, c.required, c.source_label) for c in view.checks] == [
        ("a", True, "Procédure"), ("l1", False, "Léa"), ("sys", True, "Système")]
    assert view.required_ids == ["a", "sys"] and view.checks[1].evidence == "vu à l'écran"
    assert pause_view(summary(), []) is None  # running: no dialog


def test_timeline_lines_say_who_did_what() -> None:
    resumed = timeline_entry(record(8, "replay_resumed", {
        "operator": "Dr Martin", "acknowledged_check_ids": ["a", "b"]}))
    assert resumed.text == "Repris par Dr Martin (2 vérification(s) cochée(s))"
    assert resumed.operator == "Dr Martin" and resumed.acknowledged_check_ids == ["a", "b"]
    failed = timeline_entry(record(5, "report_received", {"status": "accepted", "report": {
        "action_id": "s3", "success": False, "error": "target_not_found"}},
        shots={"after": "a" * 64, "before": "b" * 64}))
    assert failed.text == "Étape s3 en échec : target_not_found" and failed.action_id == "s3"
    assert [s.name for s in failed.screenshots] == ["after", "before"]
    unknown = timeline_entry(record(6, "something_new", {"action_id": "s4"}))
    assert unknown.text == "Something new — s4"


# The live list ------------------------------------------------------------------------------

def test_the_board_keeps_the_last_event_and_puts_pauses_first() -> None:
    board = Board()
    assert [r.replay_id for r in board.apply([summary()])] == ["r1"]
    assert board.apply([summary()]) == []  # unchanged: nothing to push
    event = Event(topic="lea:action_dispatched", source="dispatcher", at=200.0,
                  data={"replay_id": "r1", "action_id": "s2"})
    assert board.note(event) == "r1"
    shown = board.refresh_event("r1")
    assert shown is not None and shown.last_event is not None
    assert shown.last_event.text == "Étape s2 envoyée au poste"
    quiet = Event(topic="lea:monitor_routed", source="monitor_router", at=201.0,
                  data={"replay_id": "r1", "action_id": "s2"})
    board.note(quiet)
    assert board.refresh_event("r1") is None  # a routing detail is not a "last event"
    assert board.note(Event(topic="lea:peer_connected", source="broker", at=1.0)) is None
    board.remember("r1", "replay_started", {"total": 5}, 50.0)  # the bus's event stands
    last = board.row("r1")
    assert last is not None and last.last_event is not None
    assert last.last_event.text == "Étape s2 envoyée au poste"

    board.apply([summary(replay_id="r2", created_at=300.0),
                 summary(replay_id="r3", created_at=50.0, status="paused_need_help",
                         pause_reason="user_request"),
                 summary(replay_id="r4", created_at=400.0, status="completed")])
    assert [r.replay_id for r in board.rows()] == ["r3", "r2", "r1", "r4"]
    paused = board.row("r3")
    assert paused is not None and paused.status_label == "En attente de validation"
    assert not board.has_last("r3")
    board.remember("r3", "replay_paused", {"reason": "user_request"}, 60.0)  # from the trail
    assert board.has_last("r3")
    found = board.refresh_event("r3")
    assert found is not None and found.last_event is not None
    assert found.last_event.text == "En pause : vérification humaine demandée"
    assert row(summary(status="completed"), None, "s9").current_step is None


def test_a_slow_stream_is_told_to_resync_instead_of_growing() -> None:
    async def scenario() -> None:
        hub = Hub()
        slow, fast = hub.open(), hub.open()
        for i in range(STREAM_QUEUE + 1):
            hub.publish("replay", {"n": i})
            if not fast.empty():
                await fast.get()
        assert hub.streams == 1
        assert await slow.get() == ("resync", {"reason": "too_slow"})
        assert await slow.get() is None
        hub.shutdown()
        assert await fast.get() == ("resync", {"reason": "server_stopping"})
        assert await fast.get() is None

    asyncio.run(scenario())
