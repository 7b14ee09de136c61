"""PowerFS: a FUSE filesystem that keeps what is not fsync'ed in a "page cache" it can drop.

The power-loss tests mount one per machine (the server's disk, a workstation's disk) and put
the data directories on it. Writing ``cut`` to ``<mount>/.powerfs`` is the power cut: every
file goes back to its content at its last fsync, and every directory to its entries at its
last fsync (the processes that used the disk are killed first, as a cut kills them).

What it models (the weakest guarantees POSIX gives; docs/durability.md says the same):
- A file's data and size are durable only once the file is fsync'ed (fsync or fdatasync, on
  any descriptor of it). Unsynced writes are all lost at a cut: none is half-kept (torn or
  reordered writeback is not modelled; SQLite's checksums would catch those anyway).
- A name in a directory (created, renamed, removed) is durable only once that directory is
  fsync'ed. A file fsync'ed whose name never was is gone after a cut; a rename not followed
  by an fsync of its directory is undone.
- Everything is in memory; nothing reaches the real disk. POSIX and flock locks are the
  kernel's (no ``lock`` here), as on a local disk.

Reading ``<mount>/.powerfs`` gives counters as JSON (fsyncs, cuts, bytes and names lost by
the last cut), with which a test proves a cut actually dropped something.

Run: ``python -m tests.powerfs MOUNTPOINT`` (foreground; fusermount3 -u to stop).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mfusepy as fuse

from runtime.durability import fsync_dir

CONTROL = "/.powerfs"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(eq=False)
class Node:
    is_dir: bool
    mode: int
    data: bytearray = field(default_factory=bytearray)
    durable: bytes | None = None  # a file's content at its last fsync (None: never)
    entries: dict[str, Node] = field(default_factory=dict)
    durable_entries: dict[str, Node] | None = None  # a directory's, at its last fsync
    mtime: float = field(default_factory=time.time)


class PowerFS(fuse.Operations):  # type: ignore[misc]  # mfusepy has no type hints
    """The filesystem (single-threaded: the FUSE loop runs with ``nothreads``)."""

    use_ns = True  # utimens gets nanoseconds

    def __init__(self) -> None:
        self.root = Node(True, stat.S_IFDIR | 0o755, durable_entries={})
        self.handles: dict[int, Node] = {}
        self.next_fh = 1
        self.stats: dict[str, int] = {"fsyncs": 0, "fsyncdirs": 0, "cuts": 0,
                                      "lost_bytes": 0, "lost_names": 0}

    # Lookup -------------------------------------------------------------------------------

    def _node(self, path: str) -> Node:
        node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir or part not in node.entries:
                raise fuse.FuseOSError(errno.ENOENT)
            node = node.entries[part]
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._node(head or "/")
        if not parent.is_dir:
            raise fuse.FuseOSError(errno.ENOTDIR)
        return parent, name

    def _open(self, node: Node) -> int:
        fh, self.next_fh = self.next_fh, self.next_fh + 1
        self.handles[fh] = node
        return fh

    # The power cut --------------------------------------------------------------------------

    def cut(self) -> None:
        """Every directory and file back to what its last fsync made durable."""
        lost = {"bytes": 0, "names": 0}
        seen: set[int] = set()

        def revert(node: Node) -> None:
            if id(node) in seen:
                return
            seen.add(id(node))
            if node.is_dir:
                kept = dict(node.durable_entries or {})
                lost["names"] += len(set(node.entries.items()) ^ set(kept.items()))
                node.entries = kept
                for child in kept.values():
                    revert(child)
            else:
                durable = node.durable or b""
                if bytes(node.data) != durable:
                    lost["bytes"] += max(len(node.data), len(durable))
                node.data = bytearray(durable)

        revert(self.root)
        self.handles.clear()
        self.stats["cuts"] += 1
        self.stats["lost_bytes"], self.stats["lost_names"] = lost["bytes"], lost["names"]

    def _control(self) -> bytes:
        return json.dumps(self.stats).encode()

    # Attributes -------------------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if path == CONTROL:
            return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1,
                    "st_size": len(self._control())}
        node = self.handles[fh] if fh in self.handles else self._node(path)
        size = 4096 if node.is_dir else len(node.data)
        return {"st_mode": node.mode, "st_nlink": 2 if node.is_dir else 1, "st_size": size,
                "st_mtime": node.mtime, "st_ctime": node.mtime, "st_atime": node.mtime,
                "st_uid": 0, "st_gid": 0, "st_blocks": (size + 511) // 512}

    def chmod(self, path: str, mode: int) -> int:
        node = self._node(path)
        node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self._node(path).mtime = times[1] / 1e9 if times else time.time()
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 22, "f_bfree": 1 << 21,
                "f_bavail": 1 << 21, "f_files": 1 << 20, "f_ffree": 1 << 19,
                "f_namemax": 255}

    # Directories ------------------------------------------------------------------------------

    def readdir(self, path: str, fh: int) -> list[str]:
        node = self._node(path)
        return [".", "..", *node.entries]

    def mkdir(self, path: str, mode: int) -> int:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise fuse.FuseOSError(errno.EEXIST)
        parent.entries[name] = Node(True, stat.S_IFDIR | (mode & 0o7777))
        return 0

    def rmdir(self, path: str) -> int:
        parent, name = self._parent(path)
        node = self._node(path)
        if not node.is_dir:
            raise fuse.FuseOSError(errno.ENOTDIR)
        if node.entries:
            raise fuse.FuseOSError(errno.ENOTEMPTY)
        del parent.entries[name]
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        node = self._node(path)
        node.durable_entries = dict(node.entries)
        self.stats["fsyncdirs"] += 1
        return 0

    def opendir(self, path: str) -> int:
        self._node(path)
        return 0

    def releasedir(self, path: str, fh: int) -> int:
        return 0

    # Files --------------------------------------------------------------------------------

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            node = parent.entries[name] = Node(False, stat.S_IFREG | (mode & 0o7777))
        return self._open(node)

    def open(self, path: str, flags: int) -> int:
        if path == CONTROL:
            return 0
        return self._open(self._node(path))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        if path == CONTROL:
            return self._control()[offset:offset + size]
        node = self.handles.get(fh) or self._node(path)
        return bytes(node.data[offset:offset + size])

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if path == CONTROL:
            if data.strip() == b"cut":
                self.cut()
            return len(data)
        node = self.handles.get(fh) or self._node(path)
        if offset > len(node.data):
            node.data.extend(b"\0" * (offset - len(node.data)))
        node.data[offset:offset + len(data)] = data
        node.mtime = time.time()
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if path == CONTROL:
            return 0
        node = self.handles.get(fh) if fh is not None else None
        node = node or self._node(path)
        if length < len(node.data):
            del node.data[length:]
        else:
            node.data.extend(b"\0" * (length - len(node.data)))
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        node = self.handles.get(fh) or self._node(path)
        node.durable = bytes(node.data)
        self.stats["fsyncs"] += 1
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        self.handles.pop(fh, None)
        return 0

    def unlink(self, path: str) -> int:
        parent, name = self._parent(path)
        if name not in parent.entries:
            raise fuse.FuseOSError(errno.ENOENT)
        del parent.entries[name]
        return 0

    def rename(self, old: str, new: str) -> int:
        old_parent, old_name = self._parent(old)
        new_parent, new_name = self._parent(new)
        if old_name not in old_parent.entries:
            raise fuse.FuseOSError(errno.ENOENT)
        target = new_parent.entries.get(new_name)
        if target is not None and target.is_dir and target.entries:
            raise fuse.FuseOSError(errno.ENOTEMPTY)
        new_parent.entries[new_name] = old_parent.entries.pop(old_name)
        return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.powerfs MOUNTPOINT", file=sys.stderr)
        return 2
    # No kernel caching of names or attributes: after a cut the kernel must ask again.
    fuse.FUSE(PowerFS(), argv[0], foreground=True, nothreads=True, attr_timeout=0.0,
              entry_timeout=0.0, negative_timeout=0.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


class Disk:
    """A PowerFS mounted at ``mountpoint`` by a daemon process, for a test to cut."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        mountpoint.mkdir(parents=True, exist_ok=True)
        self.log = mountpoint.with_name(mountpoint.name + ".log")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.powerfs",
                                          str(mountpoint)], cwd=ROOT, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not os.path.ismount(mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PowerFS did not mount: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def mkdir(self, relative: str) -> Path:
        """A directory on the disk, its name durable (the cut keeps it), parents included."""
        path = self.mountpoint
        for part in Path(relative).parts:
            path.joinpath(part).mkdir(exist_ok=True)
            fsync_dir(path)
            path = path / part
        return path

    def cut(self) -> dict[str, int]:
        """The power cut (kill the processes that use the disk first); the counters."""
        (self.mountpoint / CONTROL.lstrip("/")).write_bytes(b"cut")
        return self.stats()

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = json.loads((self.mountpoint / CONTROL.lstrip("/")).read_bytes())
        return stats

    def __enter__(self) -> Disk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=False,
                       capture_output=True)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
