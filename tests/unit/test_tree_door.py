"""The tree's own door (broker/tree_door.py): its pure parts, and the services it guards."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import zmq.auth

from actors import ACTORS
from broker.curve_listener import AllowList
from broker.tree_door import (
    TREE_SERVICES,
    TREE_USER_ID,
    TreeDoorError,
    admits,
    ipc_path,
    judge,
    peer_uid,
    private_dir,
)
from supervision.tree import CONSOLE


def test_the_guarded_services_are_every_actor_and_the_console() -> None:
    # A new actor must be added to TREE_SERVICES, or agents could serve it.
    assert {s.decode() for s in TREE_SERVICES} == {*ACTORS, CONSOLE}


def test_peer_credentials_decide_who_may_come_in() -> None:
    me = os.getuid()
    assert peer_uid(f"localhost:{me}:0:4242".encode()) == me
    assert peer_uid(b"127.0.0.1") is None and peer_uid(b"") is None
    assert admits(f"localhost:{me}:0:1".encode()) is None
    assert "not the tree's user" in (admits(b"localhost:4321:0:1", uid=1000) or "")
    assert "unknown" in (admits(b"127.0.0.1") or "")  # no credentials: fail closed


def test_zap_verdicts_of_the_trees_door() -> None:
    me = os.getuid()
    ok = judge([b"1.0", b"1", b"lea-tree", f"localhost:{me}:0:7".encode(), b"", b"NULL"])
    assert (ok.status, ok.user_id) == (b"200", TREE_USER_ID)
    other = judge([b"1.0", b"1", b"lea-tree", f"localhost:{me + 1}:0:7".encode(), b"", b"NULL"])
    assert other.status == b"400" and other.user_id == ""
    curve = judge([b"1.0", b"1", b"lea-tree", f"localhost:{me}:0:7".encode(), b"", b"CURVE",
                   b"k" * 32])
    assert curve.status == b"400"


def test_the_door_is_an_ipc_path_in_an_owner_only_directory(tmp_path: Path) -> None:
    assert ipc_path(f"ipc://{tmp_path}/run/tree.sock") == tmp_path / "run" / "tree.sock"
    for bad in ("tcp://127.0.0.1:5555", "ipc://", "ipc:///" + "x" * 200):
        with pytest.raises(TreeDoorError):
            ipc_path(bad)
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    run.chmod(0o755)
    private_dir(run)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700


def test_no_allow_list_file_can_give_the_trees_user_id(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    zmq.auth.create_certificates(allowed, "WS1")
    zmq.auth.create_certificates(allowed, TREE_USER_ID)  # a valid key, a reserved name
    allow = AllowList(allowed)
    allow.refresh()
    assert len(allow) == 1 and len(allow.problems) == 1
    assert "must name the agent" in allow.problems[0]
