"""Operator accounts: roles, names and passwords, the sign-in limit, and the console's own
database (sessions that expire, changes recorded in its audit outbox). Real SQLite files,
real argon2 hashes; times are passed in, so nothing waits."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from audit_outbox.store import AuditOutbox
from console.account_store import AccountStore, session_hash, short
from console.accounts import (
    Failures,
    OncePer,
    hash_password,
    may,
    name_problem,
    password_matches,
    password_problem,
    wait_before_login,
)

PASSWORD = "correct horse battery"
BY = {"os_user": "root", "via": "command_line"}


def test_roles_allow_reading_answering_and_administering_in_steps() -> None:
    assert may("viewer", "read") and not may("viewer", "answer")
    assert may("operator", "answer") and not may("operator", "administer")
    assert may("admin", "answer") and may("admin", "administer")
    assert not may("nobody", "read")


def test_work_items_viewer_reads_operator_retries_and_skips_admin_cancels() -> None:
    assert not may("viewer", "handle_items") and not may("viewer", "cancel_items")
    assert may("operator", "handle_items") and not may("operator", "cancel_items")
    assert may("admin", "handle_items") and may("admin", "cancel_items")


@pytest.mark.parametrize(("name", "ok"), [("alice", True), ("dr.martin", True),
                                          ("ide_dupont-2", True), ("a", False),
                                          ("Alice", False), ("2alice", False),
                                          ("al ice", False), ("x" * 65, False)])
def test_account_names(name: str, ok: bool) -> None:
    assert (name_problem(name) is None) == ok


def test_password_rules() -> None:
    assert password_problem("alice", PASSWORD) is None
    assert "at least" in (password_problem("alice", "short") or "")
    assert "spaces" in (password_problem("alice", f" {PASSWORD}") or "")
    assert "account name" in (password_problem("alice", "my name is ALICE ok") or "")


def test_a_hash_checks_its_password_and_an_unknown_account_never_matches() -> None:
    hashed = hash_password(PASSWORD)
    assert hashed.startswith("$argon2id$") and PASSWORD not in hashed
    assert password_matches(hashed, PASSWORD)
    assert not password_matches(hashed, PASSWORD + "!")
    assert not password_matches(None, PASSWORD)
    assert not password_matches("not a hash", PASSWORD)


def test_the_limit_waits_for_the_oldest_failure_to_leave_the_window() -> None:
    none = Failures(0, None)
    assert wait_before_login(Failures(4, 100.0), none, 110.0, 900.0, 5, 20) is None
    assert wait_before_login(Failures(5, 100.0), none, 110.0, 900.0, 5, 20) == ("account",
                                                                                 890.0)
    assert wait_before_login(none, Failures(20, 500.0), 600.0, 900.0, 5, 20) == ("address",
                                                                                  800.0)


def test_once_per_period() -> None:
    once = OncePer()
    assert once.first("k", 0.0, 10.0)
    assert not once.first("k", 5.0, 10.0)
    assert once.first("other", 5.0, 10.0)
    assert once.first("k", 10.0, 10.0)


def records(path: Path) -> list[tuple[str, dict[str, object]]]:
    outbox = AuditOutbox(path)
    try:
        return [(r.kind, r.data) for _, r in outbox.pending(0, 1000)]
    finally:
        outbox.close()


def test_the_store_is_owner_only_and_every_change_is_recorded(tmp_path: Path) -> None:
    store = AccountStore.in_dir(tmp_path)
    store.add("alice", "operator", hash_password(PASSWORD), 1.0, BY)
    with pytest.raises(ValueError, match="already exists"):
        store.add("alice", "viewer", hash_password(PASSWORD), 2.0, BY)
    store.change("alice", 3.0, BY, role="viewer")
    store.change("alice", 4.0, BY, disabled=True)
    with pytest.raises(LookupError):
        store.change("bob", 5.0, BY, disabled=True)
    account = store.get("alice")
    assert account is not None and account.role == "viewer" and account.disabled
    store.close()
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    kinds = records(store.path)
    assert [k for k, _ in kinds] == ["account_added", "account_role_changed",
                                     "account_disabled"]
    assert all(d["os_user"] == "root" and d["account"] == "alice" for _, d in kinds)
    assert kinds[1][1]["previous_role"] == "operator"


def test_a_session_is_known_by_its_hash_and_expires(tmp_path: Path) -> None:
    store = AccountStore.in_dir(tmp_path)
    store.add("alice", "operator", hash_password(PASSWORD), 1.0, BY)
    account = store.get("alice")
    assert account is not None
    cookie = "a-random-cookie-value"
    store.open_session(session_hash(cookie), account, "127.0.0.1", 10.0, 20.0, "account:alice",
                       [])
    assert store.session(cookie, 11.0).state == "unknown"  # the value itself opens nothing
    assert store.session(session_hash(cookie), 19.9).state == "valid"
    assert store.session(session_hash(cookie), 20.0).state == "expired"
    assert store.session(session_hash(cookie), 21.0).state == "expired"  # and stays so
    store.close()
    kinds = [(k, d) for k, d in records(store.path) if k != "account_added"]
    assert [k for k, _ in kinds] == ["login_succeeded", "session_expired"]  # once
    assert kinds[0][1]["session"] == short(session_hash(cookie))
    assert cookie not in store.path.read_bytes().decode("latin-1")


def test_logout_disable_and_a_new_password_end_sessions(tmp_path: Path) -> None:
    store = AccountStore.in_dir(tmp_path)
    store.add("alice", "operator", hash_password(PASSWORD), 1.0, BY)
    account = store.get("alice")
    assert account is not None
    for n in range(3):
        store.open_session(f"h{n}", account, "127.0.0.1", 10.0, 1000.0, "account:alice", [])
    assert store.end_session("h0", 11.0) and not store.end_session("h0", 12.0)
    assert store.session("h0", 13.0).state == "ended"
    store.change("alice", 14.0, BY, password_hash=hash_password(PASSWORD + "2"))
    assert store.session("h1", 15.0).state == "ended"
    store.open_session("h3", account, "127.0.0.1", 16.0, 1000.0, "account:alice", [])
    store.change("alice", 17.0, BY, disabled=True)
    assert store.session("h3", 18.0).state == "ended"
    store.close()
    ended = [d for k, d in records(store.path) if k == "sessions_ended"]
    assert [(d["sessions"], d["why"]) for d in ended] == [(2, "new password"),
                                                          (1, "account disabled")]


def test_failures_are_counted_per_scope_within_the_window(tmp_path: Path) -> None:
    store = AccountStore.in_dir(tmp_path)
    for at in (1.0, 2.0, 3.0):
        store.attempt(["account:alice", "address:10.0.0.1"], at, 100.0)
    assert store.failures("account:alice", 0.0) == Failures(3, 1.0)
    assert store.failures("account:alice", 2.5) == Failures(1, 3.0)
    assert store.failures("address:10.0.0.2", 0.0) == Failures(0, None)
    # A good password takes its attempt back, and clears its account's failures only.
    store.add("alice", "operator", hash_password(PASSWORD), 4.0, BY)
    account = store.get("alice")
    assert account is not None
    rows = store.attempt(["account:alice", "address:10.0.0.1"], 5.0, 100.0)
    assert store.failures("address:10.0.0.1", 0.0).count == 4
    store.open_session("h", account, "10.0.0.1", 5.0, 50.0, "account:alice", rows)
    assert store.failures("account:alice", 0.0).count == 0
    assert store.failures("address:10.0.0.1", 0.0) == Failures(3, 1.0)
    # Older than the window: forgotten at the next attempt.
    store.attempt(["address:10.0.0.9"], 500.0, 100.0)
    assert store.failures("address:10.0.0.1", 0.0).count == 0
    store.close()
