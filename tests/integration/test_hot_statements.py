"""What SQLite runs for the API's busiest writes (POST /v1/tasks, an agent's heartbeat): each
statement is the store thread's time and a hand-over of the interpreter lock to the loop, so
one that reads back what the call has just written is a cost with nothing to show for it."""

from __future__ import annotations

import re
from pathlib import Path

from taskherd.model import NewTask
from taskherd.store.sqlite import SQLiteStore

NOW = 1_800_000_000  # a whole second, as an int
READS_TASKS = re.compile(r"^SELECT\b.*\bFROM\s+tasks\b(?!_)", re.I | re.S)


def statements_of(store: SQLiteStore, call) -> list[str]:
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        call()
    finally:
        store._conn.set_trace_callback(None)
    return [s.strip() for s in statements]


def test_a_task_added_is_answered_without_reading_it_back(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "q.db", durability="normal")
    try:
        run = statements_of(store, lambda: store.enqueue(
            NewTask(role="coder", title="t", meta={"k": 1}), NOW))
        assert [s for s in run if s.upper().startswith("INSERT INTO TASKS")]
        assert [s for s in run if READS_TASKS.match(s)] == []
        parent = store.enqueue(NewTask(role="coder", title="parent"), NOW).task
        # A child's root and depth are its parent's, read by the INSERT: that row is read.
        child = store.enqueue(NewTask(role="coder", title="child", parent_id=parent.id), NOW)
        assert (child.task.root_id, child.task.depth) == (parent.id, 1)
        # The answer, not read, is the row as SQLite keeps it: each value of the type read
        # (a REAL column's whole second a float), the fields in the order read (the API's
        # answer is written from them).
        later = store.enqueue(NewTask(role="coder", title="later", run_after=NOW + 60,
                                      pending=True, meta={"k": [1, None]}), NOW)
        assert [(name, type(value)) for name, value in later.task.to_dict().items()] == \
            [(name, type(value)) for name, value in store.get_task(later.task.id).to_dict().items()]
    finally:
        store.close()


def test_each_call_of_a_group_releases_its_savepoint(tmp_path: Path) -> None:
    """A group's calls (the API's tasks added and heartbeats of a batch) are each a savepoint,
    released once the call is kept: left open until the group's COMMIT they nested deeper
    with each call, and every write under them cost SQLite ~11 µs more."""
    store = SQLiteStore(tmp_path / "q.db", durability="normal")
    try:
        def group() -> None:
            with store.writes_grouped():
                for n in range(3):
                    store.enqueue(NewTask(role="coder", title=f"t{n}"), NOW)

        run = [s.split()[0].upper().rstrip(";") for s in statements_of(store, group)]
        assert [s for s in run if s in ("SAVEPOINT", "RELEASE", "COMMIT")] == \
            ["SAVEPOINT", "RELEASE"] * 3 + ["COMMIT"]
        assert sorted(task.title for task in store.list_tasks()) == ["t0", "t1", "t2"]
    finally:
        store.close()
