"""The history kept short and counted once: pruning what finished long ago, and the roll-up
of finished tasks and runs into the counters; a part of `SQLStore`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taskherd.store.sql_parts import SQLParts
from taskherd.store.sql_parts import one_row as _one

# How far behind the present the finished tasks' mark stays (seconds).
ROLLUP_MARGIN = 60.0


class SQLHistory(SQLParts):
    def prune(self, before: float) -> int:
        with self._write() as db:
            self._prune_messages(db, before)
            db.execute(self.q["prune_deliveries"], {"before": before})
            # What /metrics counts of the runs going is kept, in this transaction: its
            # counters are these totals plus the runs still kept, and never go down.
            db.execute(self.q["fold_pruned_runs"], {"before": before})
            return db.execute(self.q["prune_finished_tasks"], {"before": before}).rowcount

    def _past_the_marks(self, read: Callable[[Any], list[Any]]) -> list[Any]:
        """`read(marks)`, a query adding what lies past the roll-up's marks to its counters.

        The marks are read first and passed in as values (read inside the statement, they
        left PostgreSQL planning the range blind, as a scan of the whole history). A roll-up
        committed in between would have its rows counted twice, from the counters and past
        the old mark: so the marks are read again after, and the query repeated if they moved.
        """
        def current() -> dict[str, Any]:
            [row] = self._all("rollup_marks")
            return {"tasks_through": row["tasks_through"], "runs_through": row["runs_through"]}

        marks = current()
        while True:
            rows = read(marks)
            again = current()
            if again == marks:
                return rows
            marks = again

    def roll_up(self, now: float) -> int:
        folded = 0
        with self._write() as db:
            mark = _one(db.execute(self.q["runs_mark"]))
            if mark["through"] > mark["marked"]:
                db.execute(self.q["lock_runs_for_rollup"])
                # Again under the lock: the oldest open run may be one committed meanwhile.
                through = {"through": _one(db.execute(self.q["runs_mark"]))["through"]}
                folded += db.execute(self.q["roll_up_runs"], through).rowcount
                db.execute(self.q["roll_up_role_last_runs"], through)
                db.execute(self.q["advance_runs_mark"], through)
        # A task counts once it finished before the mark; the margin leaves room for a settle
        # stamped with a `now` taken a moment before its transaction got the write lock.
        through = {"through": now - ROLLUP_MARGIN}
        with self._write() as db:
            folded += db.execute(self.q["roll_up_finished_tasks"], through).rowcount
            db.execute(self.q["advance_tasks_mark"], through)
        return max(folded, 0)
