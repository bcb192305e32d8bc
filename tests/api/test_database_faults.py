"""A request that meets a fault of the machine (a locked, full or unreachable database) is
answered 503 with one line saying what and what to do, never 409 (the request was fine) and
never a 500 with a trace."""

from __future__ import annotations

import sqlite3

from taskherd.api.app import refusal
from taskherd.store.errors import StoreDiskFull, StoreUnavailable
from tests.api_server import served


def test_a_locked_database_is_a_503_the_client_may_retry(tmp_path):
    with served(tmp_path) as api:
        database = api.queue.config.daemon.database
        holder = sqlite3.connect(database, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process's writer holding the lock
        # The server waits for the lock as long as its store's busy_timeout: shorten it on the
        # server's own connection so the test does not wait a minute.
        api.server.api.store._conn.execute("PRAGMA busy_timeout = 100")
        answer = api.client("admin").post("/v1/tasks", json={"role": "qa", "title": "x"})
        holder.execute("ROLLBACK")
        holder.close()
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "5"
        assert "locked" in answer.json()["error"]
        assert api.queue.store.list_tasks() == []  # nothing was added


def test_every_database_fault_reads_as_503():
    for error in (StoreDiskFull("database or disk is full"),
                  StoreUnavailable("connection lost"),
                  sqlite3.OperationalError("database is locked")):
        answer = refusal(error)
        assert answer.status == 503, error
        assert "\n" not in str(answer)
