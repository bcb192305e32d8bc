"""The dashboard's charts over named SQL (`store/sql/common/charts.sql`); mixed into
`SQLStore`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.store.charts import Buckets, ChartStore

# Runs take their ids in claim order, by each node's clock: a node whose clock runs behind
# another's could claim a run of the range after a run claimed before it. The search for the
# range's first run starts this much earlier; the queries then keep the range exactly.
CLOCK_SKEW = 300.0
# An agent starts within seconds of its claim (a run claimed but never spawned is rescued
# after 30 s by default): a run started in the range was claimed at most this long before it.
CLAIM_TO_SPAWN = 3600.0


class SQLCharts(ChartStore):
    if TYPE_CHECKING:
        from taskherd.store.connection import Connection

        q: Mapping[str, str]

        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _write(self) -> AbstractContextManager[Connection]: ...

    def sample_queue_depth(self, at: float, roles: Sequence[str]) -> int:
        counted = {row["role"]: (int(row["ready"]), int(row["running"]))
                   for row in self._all("queue_depth_now")}
        written = 0
        with self._write() as db:
            for role in sorted(set(roles) | set(counted)):
                ready, running = counted.get(role, (0, 0))
                written += db.execute(self.q["insert_queue_sample"], {
                    "at": at, "role": role, "ready": ready, "running": running}).rowcount
        return written

    def prune_queue_samples(self, before: float) -> int:
        with self._write() as db:
            return int(db.execute(self.q["prune_queue_samples"], {"before": before}).rowcount)

    def queue_depth_buckets(self, buckets: Buckets) -> list[dict[str, Any]]:
        return [{"bucket": int(row["bucket"]), "role": row["role"], "ready": int(row["ready"]),
                 "running": int(row["running"]), "samples": int(row["samples"])}
                for row in self._all("queue_depth_buckets", buckets.params())]

    def finished_buckets(self, buckets: Buckets) -> list[dict[str, Any]]:
        return [{"bucket": int(row["bucket"]), "state": row["state"], "n": int(row["n"])}
                for row in self._all("finished_buckets", buckets.params())]

    def latency_histogram(self, buckets: Buckets) -> list[dict[str, Any]]:
        first = self._first_run_from(buckets.start - CLAIM_TO_SPAWN)
        return [{"bucket": int(row["bucket"]),
                 "le": None if row["le"] is None else float(row["le"]), "n": int(row["n"])}
                for row in self._all("latency_histogram",
                                     buckets.params() | {"first_id": first})]

    def cost_buckets(self, buckets: Buckets) -> list[dict[str, Any]]:
        first = self._first_run_from(buckets.start)
        return [{"bucket": int(row["bucket"]), "role": row["role"], "outcome": row["outcome"],
                 "runs": int(row["runs"]), "cost_usd": float(row["cost_usd"]),
                 "unpriced": int(row["unpriced"])}
                for row in self._all("cost_buckets", buckets.params() | {"first_id": first})]

    def _first_run_from(self, since: float) -> int:
        """An id at or below that of the first run claimed at `since` or later: a binary
        search by the primary key (twenty lookups for a million runs), where finding it by
        time would read every run kept, there being no index on a run's times (each would
        cost every claim and end a page written)."""
        [bounds] = self._all("run_id_range")
        if bounds["first"] is None:
            return 0
        since -= CLOCK_SKEW
        low, high = int(bounds["first"]), int(bounds["last"]) + 1
        while low < high:
            middle = (low + high) // 2
            [row] = self._all("run_at_or_after", {"id": middle})
            if float(row["claimed_at"]) < since:
                low = int(row["id"]) + 1
            else:
                high = middle
        return low
