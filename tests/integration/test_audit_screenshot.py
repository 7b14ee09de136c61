"""audit_log's GetScreenshot (what the supervisor console shows), as a real process: an image
by its hash, checked against it before it is served, and why it is not there when it is not
(never stored, pruned by retention, changed on disk)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from PIL import Image

from actors.audit_log.store.audit_store import audit_paths
from messages.audit import (
    AppendRecords,
    GetScreenshot,
    PruneScreenshots,
    RecordsAcked,
    Screenshot,
    ScreenshotsPruned,
)
from tests.conftest import Spawn
from tests.integration.test_audit_log import AuditTree, record
from transport.client import CallFailed


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 20), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def refusal(tree: AuditTree, digest: str) -> CallFailed:
    with pytest.raises(CallFailed) as info:
        tree.client.call("audit_log", GetScreenshot(sha256=digest), retries=0)
    return info.value


def test_an_image_is_served_by_hash_and_its_absence_explained(
        spawn: Spawn, lea_env: dict[str, str]) -> None:
    tree = AuditTree(spawn, lea_env)
    tree.wait_serving()
    image = png()
    digest = hashlib.sha256(image).hexdigest()
    assert isinstance(tree.call(AppendRecords(records=[record("rp", 1, image=image)])),
                      RecordsAcked)

    got = tree.client.call("audit_log", GetScreenshot(sha256=digest)).body
    assert isinstance(got, Screenshot) and got.data == image and got.sha256 == digest

    never = refusal(tree, "0" * 64)
    assert (never.code, never.detail["state"]) == ("screenshot_not_found", "missing")

    _db, shots, _anchor = audit_paths(Path(lea_env["LEA_DATA_DIR"]))
    stored = shots / digest[:2] / digest
    stored.write_bytes(b"not the image any more")
    assert refusal(tree, digest).code == "screenshot_corrupt"  # never served as if it were
    stored.write_bytes(image)

    pruned = tree.client.call("audit_log", PruneScreenshots(older_than_days=0)).body
    assert isinstance(pruned, ScreenshotsPruned) and pruned.files_removed == 1
    gone = refusal(tree, digest)
    assert (gone.code, gone.detail["state"]) == ("screenshot_not_found", "pruned")
    tree.client.close()
