"""PostgreSQL: what adding tasks costs the task search index (migration 0039).

A batch's text goes into tasks_fts in one trigger call for the statement, not one a task;
the trigram index takes it into a small pending list, merged in bulk. Counted by the server
(pg_stat_xact_user_functions, track_functions), not timed.
"""

from __future__ import annotations

import json

from taskherd.model import NewTask
from taskherd.store.postgres import PostgresStore
from taskherd.store.sql_tasks import task_params
from taskherd.store.task_lists import TaskFilter

NOW = 1000.0


def test_a_batch_writes_its_text_in_one_trigger_call_not_one_a_task(pg_url):
    store = PostgresStore(pg_url, durability="normal")
    batch = [NewTask(role="coder", title=f"item {n}", prompt=f"word{n} text") for n in range(100)]
    rows = json.dumps([task_params(new, NOW) for new in batch])
    with store._write() as db:  # the statement enqueue_many runs, counted in its transaction
        db.execute("SET LOCAL track_functions = 'pl'")
        db.execute(store.q["insert_tasks"], {"rows": rows, "now": NOW})
        calls = {row["funcname"]: row["calls"] for row in db.execute(
            "SELECT funcname, calls FROM pg_stat_xact_user_functions").fetchall()}
    assert calls == {"tasks_fts_added": 1}  # was tasks_fts_keep: 100, one call a task
    assert [t.title for t in store.filter_tasks(TaskFilter(text="WORD42 "))] == ["item 42"]
    store.close()


def test_the_index_merges_new_entries_in_bulk_from_a_small_pending_list(pg_url):
    """A search reads the pending list too: kept at 256 kB, a few dozen pages."""
    store = PostgresStore(pg_url, durability="normal")
    with store._read() as db:
        options = db.execute("SELECT reloptions FROM pg_class "
                             "WHERE relname = 'tasks_fts_trigrams'").fetchone()["reloptions"]
    assert sorted(options) == ["fastupdate=on", "gin_pending_list_limit=256"]
    store.close()
