"""The database itself refuses impossible rows, whatever code writes them."""

import sqlite3

import pytest

from taskherd.model import NewTask
from taskherd.store.sqlite import SQLiteStore


@pytest.fixture
def db(tmp_path):
    SQLiteStore(tmp_path / "q.db").enqueue(NewTask(role="coder", title="t"), 1.0)
    connection = sqlite3.connect(tmp_path / "q.db")
    yield connection
    connection.close()


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE tasks SET state = 'exploded'",
        "UPDATE tasks SET state = 'completed'",  # final without finished_at
        "UPDATE tasks SET finished_at = 5",  # finished_at on an open task
        "UPDATE tasks SET state = 'claimed'",  # a lease state without a lease
        "UPDATE tasks SET priority = 9",
        "INSERT INTO runs (task_id, attempt, node, role, claimed_at) VALUES (999, 1, 'n', 'r', 1)",
        "INSERT INTO runs (task_id, attempt, node, role, claimed_at, outcome)"
        " VALUES (1, 1, 'n', 'r', 1, 'succeeded')",  # an outcome without ended_at
    ],
)
def test_impossible_rows_are_refused(db, statement):
    db.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(statement)


def test_records_have_exactly_the_columns_of_their_tables(tmp_path):
    """Task and Run are built straight from rows: a column without a field (or the reverse)
    would go unnoticed there, so the schema and the records must agree."""
    import dataclasses

    from taskherd.model import Run, Task

    store = SQLiteStore(tmp_path / "q.db")
    for table, record in (("tasks", Task), ("runs", Run)):
        columns = {row[1] for row in store._conn.execute(f"PRAGMA table_info({table})")}
        assert columns == {field.name for field in dataclasses.fields(record)}, table
    store.close()
