"""Screenshots encrypted at rest, with real processes: an image's bytes are found nowhere in the
data directory (SQLite, its WAL, the image files) nor in PostgreSQL (its dump and its files),
yet the console's GetScreenshot serves it and ``audit verify`` checks it; a rotated key seals
the images to come while the old ones still open; a keyring gone refuses the records that
carry images (kept by their sender), says so on the bus, and nothing is half-written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import zmq

from actors.audit_log.image_seal import key_id_of
from actors.audit_log.store.audit_store import audit_paths
from actors.audit_log.store.db import default_keyring
from messages import events
from messages.audit import AppendRecords, AuditQuery, GetScreenshot, RecordsAcked, Screenshot
from tests.conftest import Spawn, wait_until
from tests.integration.test_audit_log import AuditTree, record
from tests.integration.trail_checks import run_cli
from tests.postgres import Cluster
from transport.bus import Subscriber
from transport.client import CallFailed

Env = dict[str, str]


def patient_image() -> bytes:
    """An image whose bytes cannot be found anywhere by chance (random: not compressible)."""
    return b"\x89PNG\r\n\x1a\n" + os.urandom(6000)


def files_holding(root: Path, needle: bytes) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``needle``."""
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def served(tree: AuditTree, image: bytes) -> bytes:
    got = tree.client.call("audit_log", GetScreenshot(sha256=hashlib.sha256(image).hexdigest()),
                           retries=0).body
    assert isinstance(got, Screenshot)
    return got.data


def test_no_screenshot_byte_is_in_the_data_directory_yet_it_is_served_and_verified(
        spawn: Spawn, lea_env: Env) -> None:
    tree = AuditTree(spawn, lea_env)
    tree.wait_serving()
    image = patient_image()
    assert isinstance(tree.call(AppendRecords(records=[record("rp", 1, image=image)])),
                      RecordsAcked)
    data_dir = Path(lea_env["LEA_DATA_DIR"])
    needle = image[1000:1064]
    assert files_holding(data_dir / "audit", needle) == []
    assert [p.name for p in files_holding(data_dir, needle)] == []  # audit.db and its WAL too
    assert served(tree, image) == image
    keyring = default_keyring(data_dir)
    assert keyring.stat().st_mode & 0o777 == 0o600
    assert not keyring.is_relative_to(audit_paths(data_dir)[1])  # not with the images
    done = run_cli(lea_env, "audit", "verify")
    assert done.returncode == 0 and "1 files checked" in done.stdout, done.stdout + done.stderr

    # Without the keyring, verify says it cannot check the images (not "intact").
    elsewhere = {**lea_env, "LEA_IMAGE_KEYRING": str(data_dir / "nowhere.json")}
    blind = run_cli(elsewhere, "audit", "verify")
    assert blind.returncode == 2 and "cannot be checked" in blind.stderr, blind.stderr
    assert run_cli(elsewhere, "audit", "verify", "--no-images").returncode == 0
    tree.client.close()


def test_a_rotated_key_seals_new_images_and_the_old_ones_still_open(
        spawn: Spawn, lea_env: Env) -> None:
    tree = AuditTree(spawn, lea_env)
    tree.wait_serving()
    old, new = patient_image(), patient_image()
    tree.call(AppendRecords(records=[record("rot", 1, image=old)]))
    data_dir = Path(lea_env["LEA_DATA_DIR"])
    shots = audit_paths(data_dir)[1]

    def key_of(image: bytes) -> str | None:
        digest = hashlib.sha256(image).hexdigest()
        return key_id_of((shots / digest[:2] / digest).read_bytes())

    first_key = key_of(old)
    done = run_cli(lea_env, "audit", "keys", "rotate")
    assert done.returncode == 0, done.stderr
    ring = json.loads(default_keyring(data_dir).read_bytes())
    assert set(ring["keys"]) == {first_key, ring["current"]} and ring["current"] != first_key

    def rotation_recorded() -> bool:
        page = tree.call(AuditQuery(after_seq=0, limit=100))
        return any(r.kind == "image_key_rotated" for r in page.records)  # type: ignore[attr-defined]

    wait_until(rotation_recorded, timeout=20)
    tree.call(AppendRecords(records=[record("rot", 2, image=new)]))
    assert key_of(new) == ring["current"] and key_of(old) == first_key
    assert served(tree, old) == old and served(tree, new) == new
    listed = run_cli(lea_env, "audit", "keys", "list")
    assert f"{ring['current']}" in listed.stdout and "current" in listed.stdout
    assert run_cli(lea_env, "audit", "verify").returncode == 0
    tree.client.close()


def test_a_keyring_gone_refuses_images_says_so_and_loses_nothing(
        spawn: Spawn, lea_env: Env) -> None:
    tree = AuditTree(spawn, lea_env)
    tree.wait_serving()
    first = patient_image()
    tree.call(AppendRecords(records=[record("gone", 1, image=first)]))
    keyring = default_keyring(Path(lea_env["LEA_DATA_DIR"]))
    bus = Subscriber(zmq.Context.instance(), lea_env["LEA_BUS_OUT_ENDPOINT"],
                     events.IMAGE_KEY_UNAVAILABLE)
    kept = keyring.with_name("kept.json")
    keyring.rename(kept)
    later = record("gone", 2, image=patient_image())

    def noticed() -> bool:  # (the actor reads the keyring's file again every second)
        try:
            served(tree, first)
        except CallFailed as exc:
            return exc.code == "image_key_unavailable"
        return False

    wait_until(noticed, timeout=20)
    with pytest.raises(CallFailed) as info:
        tree.client.call("audit_log", AppendRecords(records=[later]), retries=0)
    assert info.value.code == "image_key_unavailable" and "no image keyring" in \
        info.value.message
    event = bus.recv(timeout_s=10)
    assert event is not None and "no image keyring" in event.data["reason"]
    acked = tree.call(AppendRecords(records=[record("gone", 3)]))
    assert isinstance(acked, RecordsAcked) and acked.record_ids == ["gone:3"]
    page = tree.call(AuditQuery(replay_id="gone", after_seq=0, limit=10))
    assert [r.record_id for r in page.records] == ["gone:1", "gone:3"]  # type: ignore[attr-defined]

    kept.rename(keyring)  # put back: the same record, re-sent, is stored

    def stored() -> bool:
        try:
            return isinstance(tree.call(AppendRecords(records=[later])), RecordsAcked)
        except CallFailed:
            return False

    wait_until(stored, timeout=20)
    assert served(tree, first) == first
    assert run_cli(lea_env, "audit", "verify").returncode == 0
    bus.close()
    tree.client.close()


def test_no_screenshot_byte_is_in_postgresql_nor_its_dump(
        spawn: Spawn, lea_env: Env, pg_cluster: Cluster, pg_url: str, tmp_path: Path) -> None:
    tree = AuditTree(spawn, {**lea_env, "LEA_DATABASE_URL": pg_url})
    tree.wait_serving()
    image = patient_image()
    tree.call(AppendRecords(records=[record("pg", 1, image=image)]))
    needle = image[2000:2064]
    dump = tmp_path / "dump.sql"
    subprocess.run([str(pg_cluster.bin / "pg_dump"), "--file", str(dump), pg_url], check=True,
                   timeout=60)
    text = dump.read_bytes()
    assert b"images" in text  # the dump holds the table
    assert needle.hex().encode() not in text and needle not in text  # bytea dumps as hex
    assert files_holding(pg_cluster.dir, needle) == []
    assert served(tree, image) == image
    assert run_cli(tree.env, "audit", "verify").returncode == 0
    tree.client.close()
