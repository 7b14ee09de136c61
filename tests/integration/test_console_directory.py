"""Sign-in to the console with the hospital's directory: a real OpenLDAP server (Debian's
slapd, one per test session, tests/ldap_server.py), the whole tree, a simulated agent.

People sign in with their directory password; their role comes from the directory's groups
(viewer / operator / admin group DNs in the settings); a local account still signs in beside
them. Wrong password, unknown name, a disabled account (OpenLDAP's ``pwdAccountLockedTime``,
refused by the enabled filter) and a person in none of the groups are refused and recorded.
A person removed from the operators' group answers nothing more from the next request on:
the group is read again at each request.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Spawn, wait_until
from tests.integration.console_kit import (
    PASSWORD,
    add_account,
    console_records,
    console_system,
    paused_at_a_check,
)
from tests.ldap_server import (
    PEOPLE,
    SERVICE_DN,
    SERVICE_PASSWORD,
    Slapd,
    group_dn,
    group_ldif,
    person_dn,
    person_ldif,
    slapd,
)

PAUSED = "paused_need_help"
DIRECTORY_PASSWORD = "my hospital password 2026"
LOCK = "pwdAccountLockedTime: 000001010000Z"


def directory_env(server: Slapd, tmp: Path, groups: str) -> dict[str, str]:
    secret = tmp / "ldap-bind-password"
    secret.write_text(SERVICE_PASSWORD + "\n")
    secret.chmod(0o600)
    return {"LEA_CONSOLE_LDAP_URL": server.url, "LEA_CONSOLE_LDAP_BIND_DN": SERVICE_DN,
            "LEA_CONSOLE_LDAP_BIND_PASSWORD_FILE": str(secret),
            "LEA_CONSOLE_LDAP_USER_BASE": PEOPLE,
            "LEA_CONSOLE_LDAP_ENABLED_FILTER": "(!(pwdAccountLockedTime=*))",
            "LEA_CONSOLE_LDAP_VIEWER_GROUP": group_dn(f"{groups}-viewers"),
            "LEA_CONSOLE_LDAP_OPERATOR_GROUP": group_dn(f"{groups}-operators"),
            "LEA_CONSOLE_LDAP_ADMIN_GROUP": group_dn(f"{groups}-admins")}


def member(server: Slapd, group: str, uid: str, change: str) -> None:
    """``change`` (add / delete) ``uid`` in ``group``, as the hospital's IT would."""
    server.ldif(f"dn: {group_dn(group)}\nchangetype: modify\n{change}: member\n"
                f"member: {person_dn(uid)}\n", change=True)


def login(client: httpx.Client, name: str, password: str = DIRECTORY_PASSWORD) -> httpx.Response:
    return client.post("/api/login", json={"account": name, "password": password})


def error(reply: httpx.Response) -> tuple[int, Any]:
    return reply.status_code, reply.json().get("error")


def test_directory_sign_in_roles_from_groups_and_a_removal_applies_at_the_next_request(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path, slapd_server: Slapd) -> None:
    server, g = slapd_server, "wardA"
    people = ["dr.martin", "obs.durand", "chef.lea", "ide.double", "ide.verrou", "ide.seul",
              "ide.later"]
    server.ldif("\n".join(person_ldif(uid, DIRECTORY_PASSWORD) for uid in people))
    server.ldif("\n".join([
        group_ldif(f"{g}-operators", ["dr.martin", "ide.double", "ide.verrou", "ide.later"]),
        group_ldif(f"{g}-viewers", ["obs.durand", "ide.double"]),
        group_ldif(f"{g}-admins", ["chef.lea"])]))
    server.ldif(f"dn: {person_dn('ide.verrou')}\nchangetype: modify\n"
                f"add: pwdAccountLockedTime\n{LOCK}\n", change=True)

    system, url = console_system(spawn, lea_env, tmp_path,
                                 **directory_env(server, tmp_path, g))
    add_account(system, "secours", "admin")  # a local account, for a directory down
    replay_id = paused_at_a_check(system, "M1", "directory")

    def client() -> httpx.Client:
        return httpx.Client(base_url=url, timeout=15)

    with client() as c:
        assert error(login(c, "dr.martin", "not my password")) == (401, "login_failed")
        assert error(login(c, "nobody.here")) == (401, "login_failed")
        assert error(login(c, "ide.verrou")) == (403, "account_disabled")
        assert error(login(c, "ide.seul")) == (403, "no_role")
        assert error(login(c, "*")) == (401, "login_failed")  # a filter is no name
        assert c.get("/api/me").status_code == 401
    roles = {}
    for name, password in (("dr.martin", DIRECTORY_PASSWORD), ("obs.durand", DIRECTORY_PASSWORD),
                           ("chef.lea", DIRECTORY_PASSWORD), ("ide.double", DIRECTORY_PASSWORD),
                           ("Secours", PASSWORD)):
        with client() as c:
            signed = login(c, name, password)
            assert signed.status_code == 200, signed.text
            roles[name] = c.get("/api/me").json()["role"]
            assert (c.get("/api/accounts").status_code == 200) == (roles[name] == "admin")
    assert roles == {"dr.martin": "operator", "obs.durand": "viewer", "chef.lea": "admin",
                     "ide.double": "operator", "Secours": "admin"}

    with client() as martin, client() as double, client() as later:
        for c, name in ((martin, "dr.martin"), (double, "ide.double"), (later, "ide.later")):
            assert login(c, name).status_code == 200
        # Removed from the operators' group: the next request knows it.
        member(server, f"{g}-operators", "dr.martin", "delete")
        member(server, f"{g}-operators", "ide.double", "delete")
        refused = martin.post(f"/api/replays/{replay_id}/resume", json={})
        assert error(refused) == (403, "no_role")
        assert error(martin.get("/api/me")) == (401, "login_required")  # its session ended
        assert double.get("/api/me").json()["role"] == "viewer"  # still in the viewers
        assert error(double.post(f"/api/replays/{replay_id}/resume", json={})) == (
            403, "role_forbidden")
        assert system.status(replay_id).status == PAUSED
        # Disabled in the directory after signing in.
        server.ldif(f"dn: {person_dn('ide.later')}\nchangetype: modify\n"
                    f"add: pwdAccountLockedTime\n{LOCK}\n", change=True)
        assert error(later.get("/api/replays")) == (403, "account_disabled")
        # Back in the group: a new sign-in, and the answer goes through under the name.
        member(server, f"{g}-operators", "dr.martin", "add")
        assert login(martin, "dr.martin").status_code == 200
        resumed = martin.post(f"/api/replays/{replay_id}/resume",
                              json={"acknowledged_check_ids": ["chk_a"]})
        assert resumed.status_code == 200, resumed.text
    system.wait_status(replay_id, "completed", timeout=30)

    def kinds() -> list[tuple[str, Any, Any]]:
        return [(r["kind"], r["data"].get("account"), r["data"].get("reason")
                 or r["data"].get("why")) for r in console_records(system)
                if r["kind"] in ("login_failed", "login_refused", "session_ended_by_directory")]

    expected = Counter([
        ("login_failed", "dr.martin", "bad_password"),
        ("login_failed", None, "unknown_account"), ("login_failed", None, "unknown_account"),
        ("login_refused", "ide.verrou", "account_disabled"),
        ("login_refused", "ide.seul", "no_group"),
        # ide.double's session goes on, as a viewer's.
        ("session_ended_by_directory", "dr.martin", "no_group"),
        ("session_ended_by_directory", "ide.later", "account_disabled")])
    wait_until(lambda: Counter(kinds()) == expected, timeout=20, interval=0.3)
    succeeded = [r["data"] for r in console_records(system, "login_succeeded")]
    by_name = {d["account"]: d for d in succeeded}
    assert by_name["dr.martin"]["origin"] == "directory"
    assert by_name["dr.martin"]["dn"] == person_dn("dr.martin")
    assert "origin" not in by_name["secours"]



def test_a_directory_that_does_not_answer_lets_nobody_of_it_in_and_ends_no_session(
        spawn: Spawn, lea_env: dict[str, str], tmp_path: Path) -> None:
    """A directory hung (SIGSTOP: each look waits the timeout), then gone (kill -9: refused
    at once): a sign-in through it is answered 503 ``directory_unavailable``, a signed-in
    person's request too, and recorded; nobody's session ends; the local account still signs
    in; the directory back, the same session answers again."""
    with slapd(tmp_path) as server:  # its own: this test stops it
        server.ldif(person_ldif("dr.panne", DIRECTORY_PASSWORD))
        server.ldif(group_ldif("outage-operators", ["dr.panne"]))
        system, url = console_system(spawn, lea_env, tmp_path,
                                     LEA_CONSOLE_LDAP_TIMEOUT_S="1",
                                     **directory_env(server, tmp_path, "outage"))
        add_account(system, "secours", "admin")
        assert server.proc is not None
        with httpx.Client(base_url=url, timeout=30) as signed, \
                httpx.Client(base_url=url, timeout=30) as late, \
                httpx.Client(base_url=url, timeout=30) as local:
            assert login(signed, "dr.panne").status_code == 200
            assert signed.get("/api/me").json()["role"] == "operator"
            for stop in (signal.SIGSTOP, signal.SIGKILL):
                server.proc.send_signal(stop)
                assert error(login(late, "dr.panne")) == (503, "directory_unavailable")
                assert error(signed.get("/api/replays")) == (503, "directory_unavailable")
                assert late.get("/api/me").status_code == 401  # not signed in meanwhile
            signed_local = login(local, "secours", PASSWORD)
            assert signed_local.status_code == 200, signed_local.text
            assert local.get("/api/me").json()["role"] == "admin"
            server.proc.wait(timeout=10)
            server.start()  # the same database: the same people and groups
            assert signed.get("/api/me").json()["role"] == "operator"  # the session lived on
            assert login(late, "dr.panne").status_code == 200

    def outages() -> Counter[str | None]:
        return Counter(r["data"].get("account")
                       for r in console_records(system, "directory_unavailable"))

    wait_until(lambda: outages() == Counter({"dr.panne": 4}), timeout=20, interval=0.3)
    assert not console_records(system, "session_ended_by_directory")
