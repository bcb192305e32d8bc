"""A full disk is the machine's fault, not the agent's. Real ENOSPC on a real tmpfs, which
needs root (as these tests run here and in CI)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from taskherd.model import NewTask
from taskherd.store import StoreDiskFull, StoreError, open_store


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 16 MiB tmpfs, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the fault tests run as root in CI)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path, leave: int = 0) -> None:
    """Write zeros to `path` until the disk refuses (ENOSPC), then give back `leave` bytes."""
    with open(path, "ab", buffering=0) as file:
        try:
            while True:
                file.write(bytes(1 << 16))
        except OSError:
            pass
        file.truncate(file.tell() - leave)


def test_a_large_task_on_a_full_disk_is_refused_as_disk_full(tmp_path: Path,
                                                              small_disk: Path):
    """`task add` with a large prompt on a full disk: the store raises its typed error that
    says "disk full" (the CLI prints it as one line), and adds nothing."""
    database = small_disk / "q.db"
    store = open_store(str(database), durability="normal")
    try:
        store.enqueue(NewTask(role="worker", title="before"), time.time())
        assert store.checkpoint(truncate=True)  # an empty WAL: the next write must grow it
        fill(small_disk / "filler")
        with pytest.raises(StoreDiskFull, match="^disk full") as refused:
            store.enqueue(NewTask(role="worker", title="big", prompt="x" * (1 << 20)),
                          time.time())
        assert isinstance(refused.value, StoreError)
        assert [t.title for t in store.list_tasks()] == ["before"]
    finally:
        store.close()
    (small_disk / "filler").unlink()
    check = sqlite3.connect(database)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        check.close()
