"""`taskherd task import` killed with SIGKILL at several points: all or nothing, never corrupt.

The import validates every line first, then writes them all in one transaction. Kill points
are found by watching the process, never by sleeping for a guessed time: its CPU time (while it
parses, before the database is touched), the -wal file appearing (the store is open), and the
-wal file's size against what a complete import writes (mid-transaction, late, at the end).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from taskherd.store.sqlite import SQLiteStore

ROWS = 30_000
DEADLINE = 60.0  # seconds any one import may take before the test gives up on it
POLL = 0.002


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A JSONL file, an empty migrated database to copy, and the WAL size of a full import."""
    root = tmp_path_factory.mktemp("import-crash")
    source = root / "tasks.jsonl"
    with source.open("w") as out:
        for i in range(ROWS):
            # A prompt of some size, so the single write transaction spills to the WAL as it
            # goes and there is a real "middle" to kill it in.
            row = {"role": "coder", "title": f"task {i}", "prompt": f"do thing {i} " * 20,
                   "priority": f"P{i % 4}"}
            out.write(json.dumps(row) + "\n")
    template = root / "empty.db"
    SQLiteStore(template).close()

    # One import that is not killed: it must create every row, and it tells how big the WAL
    # of a complete import gets, so the kill points below can be placed along it.
    reference = prepare(root / "reference", template)
    process = start_import(reference, source)
    biggest = 0
    deadline = time.monotonic() + DEADLINE
    while process.poll() is None:
        biggest = max(biggest, wal_size(reference))
        assert time.monotonic() < deadline, "the reference import did not finish"
        time.sleep(POLL)
    assert process.returncode == 0, process.stderr.read()
    assert count_tasks(reference / "taskherd.db") == ROWS
    assert biggest > 1_000_000, f"the import's WAL only reached {biggest} bytes"
    return {"root": root, "source": source, "template": template, "wal": biggest}


def prepare(folder: Path, template: Path) -> Path:
    (folder / "home").mkdir(parents=True)
    shutil.copyfile(template, folder / "taskherd.db")
    os.chmod(folder / "taskherd.db", 0o600)
    (folder / "taskherd.toml").write_text(
        '[daemon]\ndatabase = "taskherd.db"\ndurability = "full"\n')
    return folder


def start_import(folder: Path, source: Path) -> subprocess.Popen[str]:
    env = os.environ | {
        "TASKHERD_HOME": str(folder / "home"),
        "TASKHERD_CONFIG": str(folder / "taskherd.toml"),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "taskherd", "task", "import", str(source)],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def wal_size(folder: Path) -> int:
    try:
        return (folder / "taskherd.db-wal").stat().st_size
    except FileNotFoundError:
        return 0


def count_tasks(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT count(*) FROM tasks").fetchone()[0]
    finally:
        db.close()


def cpu_seconds(process: subprocess.Popen[str]) -> float:
    try:
        times = psutil.Process(process.pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


# Each kill point: a name and a condition on (process, folder, full WAL size).
KILL_POINTS: dict[str, Callable[[subprocess.Popen[str], Path, int], bool]] = {
    "while parsing": lambda p, folder, full: cpu_seconds(p) > 0.6
    and not (folder / "taskherd.db-wal").exists(),
    "store just opened": lambda p, folder, full: (folder / "taskherd.db-wal").exists(),
    "a quarter written": lambda p, folder, full: wal_size(folder) > full * 0.25,
    "half written": lambda p, folder, full: wal_size(folder) > full * 0.5,
    "nearly all written": lambda p, folder, full: wal_size(folder) > full * 0.9,
    "at the very end": lambda p, folder, full: wal_size(folder) >= full * 0.99,
}
# Kill points late enough that the import may win the race and finish first.
MAY_FINISH = {"at the very end"}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_import_is_all_or_nothing(workspace: dict[str, object], point: str) -> None:
    folder = prepare(Path(workspace["root"]) / point.replace(" ", "-"), Path(workspace["template"]))
    process = start_import(folder, Path(workspace["source"]))
    reached = KILL_POINTS[point]
    deadline = time.monotonic() + DEADLINE
    try:
        while process.poll() is None and not reached(process, folder, int(workspace["wal"])):
            assert time.monotonic() < deadline, f"kill point {point!r} never came"
            time.sleep(POLL)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()

    if point not in MAY_FINISH:
        assert process.returncode == -signal.SIGKILL, (
            f"the import finished (exit {process.returncode}) before the kill point {point!r}"
        )

    db = sqlite3.connect(folder / "taskherd.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        count, low, high = db.execute("SELECT count(*), min(id), max(id) FROM tasks").fetchone()
    finally:
        db.close()
    assert count in (0, ROWS), f"killed {point}: {count} of {ROWS} tasks are in the database"
    if process.returncode == 0:
        assert count == ROWS
    if count:
        assert (low, high) == (1, ROWS)
