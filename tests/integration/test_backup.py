"""`taskherd backup`: a consistent, private copy of the database, taken while another process
keeps writing; refused where it would overwrite or where the database backs itself up."""

from __future__ import annotations

import json
import multiprocessing
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from taskherd.model import NewTask
from taskherd.store import StoreError
from taskherd.store.postgres import PostgresStore
from taskherd.store.sqlite import SQLiteStore

NOW = 1_700_000_000.0


def keep_adding(path: str, started, stop) -> None:
    """Another process writing as fast as it can until told to stop."""
    with SQLiteStore(path, durability="normal") as store:
        added = 0
        while not stop.is_set():
            store.enqueue_many([NewTask(role="coder", title=f"t{added + i}") for i in range(50)],
                               NOW)
            added += 50
            if added >= 500:
                started.set()


def count_tasks(path) -> int:
    with SQLiteStore(path, durability="normal") as store:
        return sum(count.count for count in store.counts())


def test_a_backup_taken_during_writes_is_a_whole_private_database(tmp_path):
    path = tmp_path / "q.db"
    SQLiteStore(path).close()
    context = multiprocessing.get_context("spawn")
    started, stop = context.Event(), context.Event()
    writer = context.Process(target=keep_adding, args=(str(path), started, stop))
    writer.start()
    try:
        assert started.wait(60), "the writer never got going"
        with SQLiteStore(path, durability="normal") as store:
            store.backup(tmp_path / "copy.db")
    finally:
        stop.set()
        writer.join(30)
    assert writer.exitcode == 0

    copy = tmp_path / "copy.db"
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert not (tmp_path / "copy.db.partial").exists()
    with sqlite3.connect(copy) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    copied = count_tasks(copy)
    # A snapshot between two of the writer's transactions: whole batches only.
    assert 500 <= copied <= count_tasks(path) and copied % 50 == 0


def test_a_backup_never_overwrites(tmp_path):
    path, taken = tmp_path / "q.db", tmp_path / "taken.db"
    taken.write_bytes(b"something else")
    with SQLiteStore(path) as store, pytest.raises(StoreError, match="already exists"):
        store.backup(taken)
    assert taken.read_bytes() == b"something else"


def test_the_cli_writes_a_dated_backup_into_the_data_dir(tmp_path):
    (tmp_path / "taskherd.toml").write_text('[daemon]\ndatabase = "q.db"\ndata_dir = "data"\n')
    run = subprocess.run([sys.executable, "-m", "taskherd", "backup", "copy", "--json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin",
                              "TASKHERD_CONFIG": str(tmp_path / "taskherd.toml")})
    assert run.returncode == 0, run.stderr
    written = Path(json.loads(run.stdout)["path"])
    assert written.parent == tmp_path / "data" / "backups"
    assert re.fullmatch(r"taskherd-\d{8}-\d{6}\.db", written.name)
    assert list(written.parent.iterdir()) == [written]
    assert count_tasks(written) == 0


def test_postgres_points_to_its_own_tools(pg_url, tmp_path):
    with PostgresStore(pg_url) as store, pytest.raises(StoreError, match="pg_dump"):
        store.backup(tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()
