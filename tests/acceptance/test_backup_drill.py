"""The disaster drill: a daemon runs agents, a snapshot goes to S3 (moto's server on
127.0.0.1), the daemon is SIGKILLed and its database file deleted, the backup is restored and
the daemon started again.

Every task the snapshot held is back; the runs that were running when it was taken are
reconciled (the live agents re-adopted, the one that ended meanwhile settled from its exit
file); nothing that completed before the snapshot runs again. Agents wait for a release file
(their own polling; the test never sleeps) and write one line per process started.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
from pathlib import Path

from taskherd.config import load_config
from taskherd.host import procs
from taskherd.model import Outcome, TaskState
from taskherd.store import open_store
from tests.fleet import PYTHON, Fleet, agent
from tests.s3 import CREDENTIALS

AGENT = """
    import os, sys, time
    task = os.environ["TASKHERD_TASK_ID"]
    gate = sys.stdin.read().split("\\n\\n## ")[0].strip()  # the task's own words
    with open(f"starts-{task}", "a") as starts:  # one line per agent process started
        starts.write(os.environ["TASKHERD_RUN_ID"] + "\\n")
    while not os.path.exists(gate):
        time.sleep(0.05)
    print("TASK_COMPLETE: released")
"""


def titles_in(path: Path) -> dict[int, str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return dict(db.execute("SELECT id, title FROM tasks"))


def starts(root: Path, task_id: int) -> int:
    path = root / f"starts-{task_id}"
    return len(path.read_text().split()) if path.exists() else 0


def test_kill_delete_restore_start_loses_nothing_the_snapshot_held_and_runs_nothing_twice(
        tmp_path, s3):
    program = agent(tmp_path, "agent", AGENT)
    fleet = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        node = "n1"
        max_concurrent = 8

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}"]
        workdir = "{tmp_path}"
        idle_timeout = "1h"

        [backup]
        target = "s3://{s3.test_bucket}/drill"
        endpoint_url = "{s3.url}"
        region = "us-east-1"
        snapshot_every = "1h"
    """)
    try:
        _drill(fleet, tmp_path)
    finally:
        for run in fleet.store.open_runs():  # a failed drill must not leave pollers behind
            if run.pid:
                procs._kill_group(run.pid, signal.SIGKILL)
        fleet.close()


def _drill(fleet: Fleet, root: Path) -> None:
    database = Path(load_config(fleet.config_path).daemon.database)
    fleet.up()
    # The daemon's backup service takes its first snapshot as it starts.
    state = fleet.data_dir / "backup-state.json"
    fleet.wait_until(lambda: state.exists() and json.loads(state.read_text())["last_snapshot"],
                     what="the service's first snapshot")

    (root / "open-done").touch()
    done = [fleet.add(f"done {i}", prompt=str(root / "open-done")).id for i in range(3)]
    for task_id in done:
        assert fleet.wait_final(task_id).state is TaskState.COMPLETED
    held = [fleet.add(f"held {i}", prompt=str(root / f"open-{i}")).id for i in range(3)]
    fleet.wait_until(lambda: all(starts(root, t) == 1 for t in held), what="3 held agents")
    fleet.wait_until(lambda: len(fleet.store.open_runs()) == 3 and all(
        run.spawned_at for run in fleet.store.open_runs()), what="3 runs recorded as spawned")
    waiting = fleet.add("waiting for approval", prompt="x", pending=True).id

    taken = json.loads(fleet.cli("backup", "snapshot", "--json").stdout)["stored"][0]
    refused = fleet.cli("backup", "restore", check=False)
    assert refused.returncode == 1
    assert f"pid {fleet.daemon.pid}" in refused.stderr and "taskherd stop" in refused.stderr
    # What the snapshot holds, read from the backup itself (restored beside, not over).
    fleet.cli("backup", "restore", "--object", taken["key"], "--to", str(root / "snap.db"))
    in_snapshot = titles_in(root / "snap.db")
    assert set(done + held + [waiting]) <= set(in_snapshot)

    (root / "open-0").touch()  # one held agent ends after the snapshot, before the disaster
    fleet.wait_final(held[0])
    after = fleet.add("added after the snapshot", prompt="x", pending=True).id

    # The disaster: the daemon dies without a word and the database file is gone.
    fleet.stop(signal.SIGKILL)
    wal = database.with_name("q.db-wal")
    stale_wal = wal.read_bytes()  # as the crash left it (this test's own connection is open)
    fleet.store.close()
    database.unlink()
    # A WAL left beside a lost database file: restore must move it aside, never replay it.
    wal.write_bytes(stale_wal)

    restored = fleet.cli("backup", "restore")
    assert "restored" in restored.stdout and taken["key"] in restored.stdout
    fleet.store = open_store(str(database), durability="normal")
    fleet.up()

    assert titles_in(database).items() >= in_snapshot.items()
    assert after not in titles_in(database)  # after the snapshot: not in it, as documented
    # The run that ended while no daemon watched is settled from its exit file, not rerun.
    assert fleet.wait_final(held[0]).state is TaskState.COMPLETED
    # The two still running are re-adopted, then finish when released.
    for i in (1, 2):
        (root / f"open-{i}").touch()
    for task_id in held:
        assert fleet.wait_final(task_id).state is TaskState.COMPLETED
        (run,) = fleet.store.runs_of_task(task_id)
        assert run.outcome is Outcome.SUCCEEDED
    for task_id in done + held:
        assert starts(root, task_id) == 1, f"task {task_id} ran again"
        assert len(fleet.store.runs_of_task(task_id)) == 1
    assert fleet.store.get_task(waiting).state is TaskState.PENDING
    assert fleet.wait_until(lambda: not fleet.store.open_runs(), what="no open runs")

    # A clean stop leaves the database whole in its one file: the WAL truncated to nothing.
    assert fleet.stop(timeout=90) == 0
    assert not wal.exists() or wal.stat().st_size == 0
    # The daemon logged at debug level throughout: no credential, no signed request.
    log = fleet.daemon_log.read_text()
    assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in log and "AWS4-HMAC-SHA256" not in log
    assert "stored in s3://" in log  # the service's own line for each backup
    (kept,) = [p for p in root.iterdir() if ".replaced-" in p.name]
    assert kept.name.endswith("-wal") and kept.read_bytes() == stale_wal
