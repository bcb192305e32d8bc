"""The API's store thread commits the grouped calls of a batch together (tasks added,
heartbeats): one commit for them, each call still kept or rolled back on its own, and each
answered only once that commit is made. Real SQLite; the commits counted in its WAL."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from taskherd.api.store_thread import BATCH, StoreThread
from taskherd.model import NewTask
from taskherd.store import open_store
from taskherd.store.base import ParentNotFound

NOW = 1_700_000_000.0
WAIT = 20.0


def wal_commits(database: Path) -> int:
    """The commits in the database's write-ahead log: its frames that end a transaction
    (a frame header's second word, the database's size after the commit, is not 0)."""
    data = (database.parent / (database.name + "-wal")).read_bytes()
    if len(data) < 32:
        return 0
    page_size, salt = int.from_bytes(data[8:12], "big"), data[16:24]
    commits = 0
    for at in range(32, len(data) - 24 + 1, 24 + page_size):
        header = data[at:at + 24]
        if header[8:16] != salt:  # a frame of an earlier pass through the log
            break
        commits += int.from_bytes(header[4:8], "big") != 0
    return commits


def titles_kept(database: Path) -> list[str]:
    """What another connection reads: what was committed."""
    with sqlite3.connect(database) as db:
        return [row[0] for row in db.execute("SELECT title FROM tasks ORDER BY id")]


def run_batch(worker: StoreThread, store, news: list[NewTask]) -> list[object]:
    """`news` added by grouped calls queued while the thread is busy, so one batch takes them."""
    gate = threading.Event()

    async def main() -> list[object]:
        busy = asyncio.ensure_future(worker.run(gate.wait, WAIT))
        await asyncio.sleep(0.01)  # the thread has taken it: the adds queue up behind it
        adds = [asyncio.ensure_future(worker.run_grouped(store.enqueue, new, NOW))
                for new in news]
        await asyncio.sleep(0)
        gate.set()
        await busy
        return await asyncio.gather(*adds, return_exceptions=True)

    return asyncio.run(main())


@pytest.fixture
def served(tmp_path: Path):
    database = tmp_path / "q.db"
    store = open_store(str(database), durability="full", autocheckpoint=False)
    worker = StoreThread(hold=store.events_held, group=store.writes_grouped)
    try:
        yield database, store, worker
    finally:
        store.close()


def test_the_grouped_adds_of_a_batch_are_one_commit(served):
    database, store, worker = served
    before = wal_commits(database)
    answers = run_batch(worker, store, [NewTask(role="coder", title=f"t{n}")
                                        for n in range(BATCH - 1)])
    assert [answer.task.title for answer in answers] == [f"t{n}" for n in range(BATCH - 1)]
    assert wal_commits(database) - before == 1  # one a task without the group
    assert titles_kept(database) == [f"t{n}" for n in range(BATCH - 1)]


def test_a_write_that_fails_in_a_group_is_rolled_back_alone(served):
    database, store, worker = served
    answers = run_batch(worker, store, [
        NewTask(role="coder", title="first"),
        NewTask(role="coder", title="orphan", parent_id=999_999),
        NewTask(role="coder", title="last"),
    ])
    assert isinstance(answers[1], ParentNotFound)
    assert [answers[0].task.title, answers[2].task.title] == ["first", "last"]
    assert titles_kept(database) == ["first", "last"]
    # The store serves on after the group: a call of its own, then another group.
    assert asyncio.run(worker.run(store.enqueue, NewTask(role="coder", title="alone"),
                                  NOW)).created
    run_batch(worker, store, [NewTask(role="coder", title="again")])
    assert titles_kept(database) == ["first", "last", "alone", "again"]


def test_a_call_that_fails_after_writing_loses_its_writes_alone(served):
    """A grouped call's savepoint is left open once it is kept (the group's COMMIT releases
    them all): a later call's failure rolls back to its own savepoint, the newest of the
    name, and the calls kept before and after it stand."""
    database, store, _ = served

    def half_written(title: str) -> None:
        with store._write() as db:
            db.execute(store.q["insert_task"], {
                "role": "coder", "title": title, "prompt": "", "priority": 2,
                "state": "ready", "pool": None, "dedup_key": None, "review": 0,
                "max_attempts": 3, "run_after": NOW, "parent_id": None, "meta": "{}",
                "now": NOW, "chain": None})
            raise LookupError(f"{title}: refused after its first write")

    with store.events_held(), store.writes_grouped():
        store.enqueue(NewTask(role="coder", title="first"), NOW)
        with pytest.raises(LookupError):
            half_written("half")
        store.enqueue(NewTask(role="coder", title="second"), NOW)
        with pytest.raises(LookupError):
            half_written("half again")
        store.enqueue(NewTask(role="coder", title="last"), NOW)
    assert titles_kept(database) == ["first", "second", "last"]
