"""Two stores on one SQLite file in one process (the daemon's and its HTTP API's): opening
the second must not drop the first's locks, or another process closing its connection takes
itself for the last one and removes the write-ahead log under the first."""

from __future__ import annotations

import subprocess
import sys

from taskherd.model import NewTask
from taskherd.store.sqlite import SQLiteStore

CLOSE_FROM_ANOTHER_PROCESS = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("SELECT count(*) FROM tasks").fetchall()
db.close()
"""


def test_a_second_store_keeps_the_first_ones_locks(tmp_path):
    path = tmp_path / "q.db"
    first = SQLiteStore(path, durability="normal")
    first.enqueue(NewTask(role="coder", title="before"), 1000.0)
    wal = tmp_path / "q.db-wal"
    assert wal.exists()
    second = SQLiteStore(path, durability="normal")
    subprocess.run([sys.executable, "-c", CLOSE_FROM_ANOTHER_PROCESS, str(path)], check=True)
    assert wal.exists(), "another process took itself for the last connection"
    first.enqueue(NewTask(role="coder", title="after"), 1001.0)
    assert [t.title for t in second.list_tasks()] == ["before", "after"]
    second.close()
    first.close()
