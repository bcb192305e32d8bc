"""SQLite's text search index, kept in batches behind a mark (migration 0038): an enqueue
writes none of its pages, the indexer (services/text_index.py) takes the newest tasks in
chunks, and a search is right before and after, whatever ids the tasks have."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from taskherd.model import NewTask
from taskherd.services.text_index import TextIndexer, TextIndexSettings
from taskherd.store import sqlite as sqlite_store
from taskherd.store.sqlfile import migrations
from taskherd.store.sqlite import SQLiteStore
from taskherd.store.task_lists import TaskFilter
from tests.integration.test_migrations import old_database

NOW = 1_700_000_000.0


@pytest.fixture
def store(tmp_path: Path):
    with SQLiteStore(tmp_path / "q.db", durability="normal") as opened:
        yield opened


def add(store: SQLiteStore, count: int, title: str = "routine task") -> list[int]:
    return [store.enqueue(NewTask(role="coder", title=f"{title} {n}", prompt="check the build"),
                          NOW).task.id for n in range(count)]


def found(store: SQLiteStore, text: str) -> list[int]:
    return [t.id for t in store.filter_tasks(TaskFilter(text=text), limit=1000)]


def read(store: SQLiteStore, sql: str) -> list[tuple]:
    with sqlite3.connect(store.path) as db:
        return db.execute(sql).fetchall()


def in_index(store: SQLiteStore, text: str) -> list[int]:
    """The ids the FTS5 index itself holds for `text` (not the search, which adds the tail)."""
    query = " AND ".join(f'"{text[i:i + 3]}"' for i in range(len(text) - 2))
    return [row[0] for row in read(store, f"SELECT rowid FROM tasks_fts WHERE tasks_fts MATCH "
                                          f"'{query}' ORDER BY rowid")]


def index_whole(store: SQLiteStore) -> None:
    """FTS5's own check of its structure (rank 0: the tail is in tasks, not in the index)."""
    with sqlite3.connect(store.path) as db:
        db.execute("INSERT INTO tasks_fts (tasks_fts, rank) VALUES ('integrity-check', 0)")


def test_an_enqueue_writes_no_index_page(store):
    pages = "SELECT count(*), sum(length(block)) FROM tasks_fts_data"
    before = read(store, pages)
    add(store, 50)
    store.enqueue(NewTask(role="coder", title="one more"), NOW)
    assert read(store, pages) == before
    assert len(found(store, "routine")) == 50  # found all the same, from the tail


def test_the_indexer_takes_the_tail_in_chunks_and_rests_once_caught_up(store):
    ids = add(store, 45)
    indexer = TextIndexer(store, TextIndexSettings(chunk=10, chunks_a_pass=2, interval=5.0))
    assert indexer.run_once(NOW) == {"indexed": 20}
    assert indexer.next_wake(NOW) == NOW  # chunks came back full: straight on
    assert in_index(store, "routine") == ids[:20]
    assert found(store, "routine") == ids[::-1]
    assert indexer.run_once(NOW) == {"indexed": 20}
    assert indexer.run_once(NOW) == {"indexed": 5}
    assert indexer.next_wake(NOW) == NOW + 5.0
    assert indexer.run_once(NOW) == {"indexed": 0}
    assert in_index(store, "routine") == ids
    assert found(store, "routine") == ids[::-1]
    index_whole(store)


def test_an_id_used_again_below_the_mark_is_indexed_as_it_is_added(store):
    """tasks.id has no AUTOINCREMENT: once the newest tasks are deleted, a new task takes an
    id the indexer has passed already. The insert trigger indexes it then."""
    ids = add(store, 3)
    while store.index_task_text(100):
        pass
    with store._write() as db:
        db.execute(f"DELETE FROM tasks WHERE id >= {ids[1]}")
    again = store.enqueue(NewTask(role="coder", title="kestrel count"), NOW).task.id
    assert again == ids[1]
    assert in_index(store, "kestrel") == [again]
    assert found(store, "kestrel") == [again]
    with store._write() as db:
        db.execute(f"UPDATE tasks SET title = 'plover count' WHERE id = {again}")
    assert found(store, "kestrel") == [] and found(store, "plover") == [again]
    index_whole(store)


def test_a_search_that_meets_a_long_tail_indexes_it_first(store, monkeypatch):
    """No daemon, no indexer: the search itself takes a long tail into the index, once."""
    monkeypatch.setattr(sqlite_store, "LONG_TAIL", 30)
    monkeypatch.setattr(sqlite_store, "TAIL_CHUNK", 20)
    ids = add(store, 25)
    assert found(store, "routine") == ids[::-1]
    assert in_index(store, "routine") == []  # a short tail is read as it is
    ids += add(store, 25)
    assert found(store, "routine") == ids[::-1]
    assert in_index(store, "routine") == ids
    assert read(store, "SELECT indexed_to FROM tasks_fts_mark") == [(ids[-1],)]


def test_the_migration_marks_the_tasks_an_older_release_indexed(tmp_path):
    path = tmp_path / "old.db"
    before = next(m.version for m in migrations("sqlite")
                  if m.name == "task_text_indexed_in_batches") - 1
    old_database(path, before)
    with sqlite3.connect(path) as db:
        for n in range(1, 4):
            db.execute("INSERT INTO tasks (role, title, state, run_after, created_at, updated_at)"
                       f" VALUES ('qa', 'older gannet {n}', 'ready', 0, 0, 0)")
    with SQLiteStore(path) as store:
        assert read(store, "SELECT indexed_to FROM tasks_fts_mark") == [(3,)]
        newer = add(store, 2, "newer gannet")
        assert found(store, "gannet") == [*newer[::-1], 3, 2, 1]
        assert in_index(store, "gannet") == [1, 2, 3]
        index_whole(store)


def test_a_search_that_cannot_index_the_long_tail_reads_it(tmp_path, monkeypatch, caplog):
    """Another process holds the write lock past the busy timeout: the search still answers,
    from the tail, and says why it did not index."""
    monkeypatch.setattr(sqlite_store, "LONG_TAIL", 10)
    with SQLiteStore(tmp_path / "q.db", durability="normal", busy_timeout=0.05) as store:
        ids = add(store, 20)
        writer = sqlite3.connect(store.path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        try:
            assert found(store, "routine") == ids[::-1]
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert in_index(store, "routine") == []
        assert "the search reads them one by one" in caplog.text
        assert found(store, "routine") == ids[::-1]  # the lock gone: indexed, then read
        assert in_index(store, "routine") == ids


def test_the_tail_is_filtered_as_the_index_matches_are():
    """searched_tail repeats searched_tasks' filters (common/task_lists.sql): word for word,
    or a filter would hold for tasks already indexed and not for the newest."""
    from taskherd.store.sqlfile import queries

    for dialect in ("sqlite", "postgres"):
        blocks = queries(dialect)
        filters = [blocks[name].split("WHERE tasks.id = matched.id", 1)[1]
                   for name in ("searched_tasks", "searched_tail")]
        assert filters[0] == filters[1] and "LIKE" in filters[0], dialect
