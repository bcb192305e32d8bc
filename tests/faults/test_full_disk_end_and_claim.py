"""A run's end and the node's next claim written together meet a full disk (a real tmpfs,
real ENOSPC): neither is kept, the call says disk full, and the same call once space is back
ends the run and claims the next task. And where SQLite ends the whole transaction inside the
claim (as it may after SQLITE_FULL), the end is not committed half-known."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import StoreDiskFull, open_store
from tests.faults.test_full_disk import fill, small_disk  # noqa: F401 (a fixture)

NOW = 1_800_000_000.0
DONE = RunResult(Outcome.SUCCEEDED)


def test_an_end_and_claim_whose_commit_meets_a_full_disk_keep_neither(small_disk: Path):  # noqa: F811
    database = small_disk / "q.db"
    store = open_store(str(database), durability="normal")
    try:
        store.enqueue_many([NewTask(role="coder", title=f"t{i}") for i in range(2)], NOW)
        run = store.claim(ClaimRequest("n1", NOW, 60.0)).run
        second = store.list_tasks(state=TaskState.READY)[0]
        assert store.checkpoint(truncate=True)  # an empty WAL: the commit must grow it
        filler = small_disk / "filler"
        fill(filler)
        with pytest.raises(StoreDiskFull):
            store.finish_run_and_claim(run.id, DONE, RetryPolicy(), NOW + 1,
                                       ClaimRequest("n1", NOW + 1, 60.0))
        assert store.get_run(run.id).ended_at is None
        assert store.get_task(second.id).state is TaskState.READY
        assert store.runs_of_task(second.id) == []
        filler.unlink()
        finished, attempt = store.finish_run_and_claim(run.id, DONE, RetryPolicy(), NOW + 2,
                                                       ClaimRequest("n1", NOW + 2, 60.0))
        assert finished.task.state is TaskState.COMPLETED
        assert attempt.claim.task.id == second.id
    finally:
        store.close()
    with sqlite3.connect(database) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_transaction_sqlite_ended_inside_the_claim_keeps_nothing(tmp_path: Path, monkeypatch):
    store = open_store(str(tmp_path / "q.db"), durability="normal")
    try:
        store.enqueue_many([NewTask(role="coder", title=f"t{i}") for i in range(2)], NOW)
        run = store.claim(ClaimRequest("n1", NOW, 60.0)).run

        def ended_by_sqlite(db, *args):
            db.execute("ROLLBACK")  # what SQLite does itself after some errors
            raise RuntimeError("the claim's transaction is gone")

        monkeypatch.setattr(store, "_claimed", ended_by_sqlite)
        with pytest.raises(RuntimeError, match="gone"):
            store.finish_run_and_claim(run.id, DONE, RetryPolicy(), NOW + 1,
                                       ClaimRequest("n1", NOW + 1, 60.0))
        monkeypatch.undo()
        assert store.get_run(run.id).ended_at is None
        assert [task.state for task in store.list_tasks()] == [TaskState.CLAIMED,
                                                                TaskState.READY]
        finished, attempt = store.finish_run_and_claim(run.id, DONE, RetryPolicy(), NOW + 2,
                                                       ClaimRequest("n1", NOW + 2, 60.0))
        assert finished.moved and attempt.claim is not None
    finally:
        store.close()
