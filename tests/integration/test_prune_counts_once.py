"""Two nodes' monitors prune a PostgreSQL history at once: the runs they delete are added to
/metrics' totals once, by the prune that deletes them, never by both."""

from __future__ import annotations

import threading
import time

import psycopg

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store.postgres import PostgresStore


class _PausedBeforeDelete(dict):
    """The store's named SQL, with a call made when the prune's DELETE is looked up: the
    prune has counted its runs and not yet deleted them."""

    def __init__(self, queries: dict, pause) -> None:
        super().__init__(queries)
        self.pause = pause

    def __getitem__(self, name: str) -> str:
        if name == "prune_finished_tasks" and self.pause is not None:
            pause, self.pause = self.pause, None
            pause()
        return super().__getitem__(name)


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        [(waiting,)] = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'").fetchall()
    return waiting > 0


def test_two_prunes_at_once_count_each_pruned_run_once(pg_url):
    first, second = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        for n in range(3):
            first.enqueue(NewTask(role="coder", title=f"t{n}", max_attempts=1), 1000.0 + n)
            claim = first.claim(ClaimRequest("n1", 1000.0 + n, 60))
            first.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, cost_usd=0.5),
                             RetryPolicy(), 1001.0 + n)
        other_pruned: list[int] = []
        other_done = threading.Event()

        def other_node_prunes() -> None:
            try:
                other_pruned.append(second.prune(before=5000.0))
            finally:
                other_done.set()

        def meanwhile() -> None:
            # The other node's prune starts while this one holds its transaction open, and
            # goes as far as it can: it waits for this one's locks, or (unlocked) ends.
            threading.Thread(target=other_node_prunes, daemon=True).start()
            deadline = time.monotonic() + 30
            while not other_done.is_set() and not _waiting_on_a_lock(pg_url):
                assert time.monotonic() < deadline, "the other prune neither waited nor ended"
                other_done.wait(0.02)

        first.q = _PausedBeforeDelete(first.q, meanwhile)
        pruned = first.prune(before=5000.0)
        assert other_done.wait(30)
        assert pruned + other_pruned[0] == 3
        [row] = first.run_totals()
        assert (row["outcome"], row["runs"], row["cost_usd"]) == ("succeeded", 3, 1.5)
    finally:
        first.close()
        second.close()
