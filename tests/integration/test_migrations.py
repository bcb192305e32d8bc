"""Migrations: an old database migrated on open equals a fresh one; files are private."""

from __future__ import annotations

import os
import re
import sqlite3
import stat
from pathlib import Path

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, RoleLimit
from taskherd.store.sqlfile import migrations
from taskherd.store.sqlite import SQLiteStore

MIGRATIONS = migrations("sqlite")
NOW = 1_700_000_000.0


def schema(path: Path) -> list[tuple[str, str, str, str]]:
    """Every table, index, view and trigger with its SQL, whitespace normalised, sorted."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master"
            " WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
    finally:
        db.close()
    return sorted((kind, name, table, re.sub(r"\s+", " ", sql).strip())
                  for kind, name, table, sql in rows)


def applied_versions(path: Path) -> list[int]:
    db = sqlite3.connect(path)
    try:
        return [row[0] for row in db.execute("SELECT version FROM schema_migrations ORDER BY 1")]
    finally:
        db.close()


def old_database(path: Path, upto: int) -> None:
    """A database as an older taskherd left it: only migrations 1..upto applied, by hand."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        for migration in MIGRATIONS[:upto]:
            db.execute("BEGIN")
            for statement in migration.statements():
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                (migration.version, migration.name, NOW),
            )
            db.execute("COMMIT")
    finally:
        db.close()


def test_there_are_migrations_numbered_from_one() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


@pytest.mark.parametrize("upto", range(1, len(MIGRATIONS) + 1))
def test_a_migrated_database_equals_a_fresh_one(tmp_path: Path, upto: int) -> None:
    fresh = tmp_path / "fresh.db"
    SQLiteStore(fresh).close()

    old = tmp_path / "old.db"
    old_database(old, upto)
    # A task written by the old schema must survive the remaining migrations.
    db = sqlite3.connect(old, isolation_level=None)
    db.execute(
        "INSERT INTO tasks (role, title, state, run_after, created_at, updated_at)"
        " VALUES ('coder', 'from an old version', 'ready', ?, ?, ?)",
        (NOW, NOW, NOW),
    )
    db.close()

    with SQLiteStore(old) as store:
        assert [t.title for t in store.list_tasks()] == ["from an old version"]
        store.enqueue(NewTask(role="coder", title="after migrating"), NOW)
        assert store.claim(ClaimRequest("node", NOW, 60.0)) is not None

    assert schema(old) == schema(fresh)
    assert applied_versions(old) == applied_versions(fresh) == [m.version for m in MIGRATIONS]


def test_opening_twice_applies_nothing_again(tmp_path: Path) -> None:
    path = tmp_path / "taskherd.db"
    SQLiteStore(path).close()
    before = schema(path)
    SQLiteStore(path).close()
    assert schema(path) == before
    assert applied_versions(path) == [m.version for m in MIGRATIONS]


def test_database_and_wal_files_are_private(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)  # a usual umask: files would be 0644 if the store let them
    try:
        data_dir = tmp_path / "data"
        path = data_dir / "taskherd.db"
        store = SQLiteStore(path)
        try:
            store.enqueue(NewTask(role="coder", title="a write, so the WAL has content"), NOW)
            files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
            for file in files:
                assert file.exists(), f"{file.name} missing while the store is open"
                mode = stat.S_IMODE(file.stat().st_mode)
                assert mode == 0o600, f"{file.name} has mode {mode:o}, expected 600"
            assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        finally:
            store.close()
    finally:
        os.umask(old_umask)


def test_every_foreign_key_is_looked_up_through_an_index(tmp_path):
    """Deleting a parent row finds its children by the foreign key: without an index on the
    child's column that is a scan of the whole table per deleted row, and pruning turns
    quadratic (4,000 finished tasks of 8,000 took 9 s before tasks.parent_id had one)."""
    path = tmp_path / "q.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    try:
        tables = [row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        unindexed = []
        for table in tables:
            leading = {db.execute(f"PRAGMA index_info('{index[1]}')").fetchone()[2]
                       for index in db.execute(f"PRAGMA index_list('{table}')")}
            leading.add("id")  # the rowid itself
            primary = [c for c in db.execute(f"PRAGMA table_info('{table}')") if c[5]]
            if len(primary) == 1 and primary[0][2].upper() == "INTEGER":
                leading.add(primary[0][1])  # an INTEGER PRIMARY KEY is the rowid too
            unindexed += [f"{table}.{key[3]} → {key[2]}"
                          for key in db.execute(f"PRAGMA foreign_key_list('{table}')")
                          if key[3] not in leading]
    finally:
        db.close()
    assert unindexed == []


def test_rebuilding_runs_for_the_liveness_outcomes_keeps_runs_and_credentials(tmp_path):
    """0013 rebuilds the runs table (SQLite cannot widen a CHECK): the runs, their agents'
    credentials (which the drop cascades away) and the new outcomes all survive it."""
    path = tmp_path / "old.db"
    before = next(m.version for m in MIGRATIONS if m.name.endswith("liveness_verdicts")) - 1
    old_database(path, before)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("INSERT INTO tasks (id, role, title, prompt, priority, state, run_after, "
               "lease_node, lease_expires_at, created_at, updated_at) VALUES "
               "(1, 'qa', 't', '', 2, 'running', ?, 'n1', ?, ?, ?)", (NOW, NOW + 60, NOW, NOW))
    db.execute("INSERT INTO runs (id, task_id, attempt, node, role, claimed_at, spawned_at) "
               "VALUES (7, 1, 1, 'n1', 'qa', ?, ?)", (NOW, NOW))
    db.execute("INSERT INTO run_credentials VALUES ('ab12', 7, ?)", (NOW,))
    db.close()
    with SQLiteStore(path) as store:
        assert store.get_run(7).spawned_at == NOW
        finished = store.finish_run(7, RunResult(Outcome.NEEDS_INPUT, error="Continue? [y/N]"),
                                    RetryPolicy(), NOW + 5)
        assert finished.task.state.value == "blocked" and finished.task.attempts == 0
    db = sqlite3.connect(path)
    assert db.execute("SELECT run_id FROM run_credentials").fetchall() == [(7,)]
    db.close()


def test_counting_unpriced_runs_counts_those_already_rolled_up(tmp_path):
    """0032 adds the count of runs of unknown cost to the hourly sums: the runs the monitor
    rolled up before it are counted too, so an old fleet's week does not read as $0."""
    path = tmp_path / "old.db"
    before = next(m.version for m in MIGRATIONS if m.name.endswith("unpriced_runs")) - 1
    old_database(path, before)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("INSERT INTO tasks (id, role, title, prompt, priority, state, run_after, "
               "created_at, updated_at, finished_at) VALUES "
               "(1, 'qa', 't', '', 2, 'completed', ?, ?, ?, ?)", (NOW, NOW, NOW, NOW + 9))
    for run, cost in ((1, None), (2, None), (3, 0.5)):
        db.execute("INSERT INTO runs (id, task_id, attempt, node, role, claimed_at, spawned_at, "
                   "ended_at, outcome, cost_usd) VALUES (?, 1, ?, 'n1', 'qa', ?, ?, ?, "
                   "'succeeded', ?)", (run, run, NOW + run, NOW + run, NOW + run + 1, cost))
    # As the monitor left them: the three runs rolled up into their hour, the mark past them.
    db.execute("INSERT INTO spend_hours VALUES ('qa', ?, 3, 0.5, 0, 0)", (NOW // 3600 * 3600,))
    db.execute("UPDATE rollup_marks SET runs_through = 3")
    db.close()
    with SQLiteStore(path) as store:
        [row] = store.spend_by_role(NOW - 86400, NOW - 86400)
    assert (row["runs_week"], row["cost_week"], row["unpriced_week"]) == (3, 0.5, 2)


def test_no_index_is_a_prefix_of_another_on_the_same_rows(tmp_path: Path) -> None:
    """Every index is written by each insert and delete of its rows (a claim opens a run, a
    completion ends it): one whose columns lead another index over the same rows answers
    nothing the other does not, and costs a WAL page a claim and a page a completion."""
    path = tmp_path / "fresh.db"
    SQLiteStore(path).close()
    shape = re.compile(r"CREATE INDEX (\w+) ON (\w+) \(([\w, ]+)\)(?: WHERE (.*))?$")
    indexes = []
    for kind, name, table, sql in schema(path):
        match = shape.match(sql) if kind == "index" else None
        if match:  # plain column lists only: an index on expressions is its own case
            columns = tuple(c.strip() for c in match[3].split(","))
            indexes.append((name, table, columns, match[4]))
    redundant = [
        (name, wider)
        for name, table, columns, rows in indexes
        for wider, other_table, other_columns, other_rows in indexes
        if wider != name and table == other_table and rows == other_rows
        and other_columns[:len(columns)] == columns
    ]
    assert redundant == []


def test_the_open_runs_of_an_old_database_are_found_through_the_one_open_runs_index(tmp_path):
    """0035 replaces the three open-runs indexes with one: the runs open when a fleet upgrades
    (one spawned that called in, one claimed and not spawned) are still seen by the node's
    reads and counted by a claim within limits, and an ended one is not."""
    path = tmp_path / "old.db"
    before = next(m.version for m in MIGRATIONS if m.name.endswith("index_of_open_runs")) - 1
    old_database(path, before)
    db = sqlite3.connect(path, isolation_level=None)
    for task, state in ((1, "running"), (2, "claimed"), (3, "completed"), (4, "ready")):
        leased = state in ("running", "claimed")
        db.execute("INSERT INTO tasks (id, role, title, state, run_after, lease_node, "
                   "lease_expires_at, created_at, updated_at, finished_at) VALUES "
                   "(?, 'qa', 't', ?, ?, ?, ?, ?, ?, ?)",
                   (task, state, NOW, "n1" if leased else None, NOW + 60 if leased else None,
                    NOW, NOW, NOW + 2 if state == "completed" else None))
    db.execute("INSERT INTO runs (id, task_id, attempt, node, role, claimed_at, spawned_at, "
               "heartbeat_at) VALUES (7, 1, 1, 'n1', 'qa', ?, ?, ?)", (NOW, NOW, NOW + 5))
    db.execute("INSERT INTO runs (id, task_id, attempt, node, role, claimed_at) "
               "VALUES (8, 2, 1, 'n1', 'qa', ?)", (NOW,))
    db.execute("INSERT INTO runs (id, task_id, attempt, node, role, claimed_at, spawned_at, "
               "heartbeat_at, ended_at, outcome) VALUES (6, 3, 1, 'n1', 'qa', ?, ?, ?, ?, "
               "'succeeded')", (NOW, NOW, NOW + 5, NOW + 2))
    db.close()
    with SQLiteStore(path) as store:
        assert store.heartbeats_since("n1", NOW + 1) == {7: NOW + 5}
        assert store.unspawned_run_ids("n1") == [8]
        assert store.open_run_ids("n1") == {7: NOW, 8: None}
        assert [run.id for run in store.open_runs("n1")] == [7, 8]
        two = ClaimLimits({"qa": RoleLimit(max_concurrent=2)})
        attempt = store.attempt_claim(ClaimRequest("n1", NOW, 60.0, roles=["qa"], limits=two))
        assert attempt.claim is None
        assert "role qa is at max_concurrent 2 (2 running)" in attempt.refused[0].reason


def test_an_old_queue_is_claimed_rescued_and_counted_through_tasks_queue(tmp_path):
    """0036 folds tasks_ready and tasks_clock into tasks_queue: the tasks of a fleet that
    upgrades are claimed in the same order (P0 first, FIFO within a priority), a lease that
    expired before the upgrade is rescued, and the board counts every side."""
    path = tmp_path / "old.db"
    before = next(m.version for m in MIGRATIONS if m.name.endswith("ready_beside_the_leases")) - 1
    old_database(path, before)
    db = sqlite3.connect(path, isolation_level=None)
    rows = [(1, "completed", 2, None, None, NOW + 1), (2, "ready", 2, None, None, None),
            (3, "running", 2, "gone", NOW - 5, None), (4, "ready", 0, None, None, None),
            (5, "ready", 2, None, None, None), (6, "dead", 2, None, None, NOW + 2)]
    for task, state, priority, node, lease, finished in rows:
        db.execute("INSERT INTO tasks (id, role, title, state, priority, run_after, lease_node, "
                   "lease_expires_at, created_at, updated_at, finished_at) VALUES "
                   "(?, 'qa', 't', ?, ?, ?, ?, ?, ?, ?, ?)",
                   (task, state, priority, NOW - 10, node, lease, NOW - 10, NOW - 10, finished))
    db.execute("INSERT INTO runs (id, task_id, attempt, node, role, claimed_at, spawned_at) "
               "VALUES (9, 3, 1, 'gone', 'qa', ?, ?)", (NOW - 70, NOW - 70))
    db.close()
    with SQLiteStore(path) as store:
        counts = {(c.state.value, c.count) for c in store.counts()}
        assert counts == {("ready", 3), ("running", 1), ("completed", 1), ("dead", 1)}
        [rescued] = store.rescue_expired(NOW, lambda role: RetryPolicy())
        assert (rescued.task.id, rescued.run.outcome) == (3, Outcome.LOST)
        claimed = [store.claim(ClaimRequest("n1", NOW, 60.0)).task.id for _ in range(4)]
        assert claimed == [4, 2, 3, 5]  # P0 first; the rescued task 3 is ready again, FIFO
        assert store.claim(ClaimRequest("n1", NOW, 60.0)) is None
