"""The dashboard's charts over named SQL (`store/sql/common/charts.sql`); mixed into
`SQLStore`."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
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
SPAN = 900.0  # the sums kept are of quarter hours: the day's chart's buckets, 4 to the week's
KEEP = 7 * 86400.0  # the sums kept: the longest range
CHUNK = 96  # quarter hours summed in one go: a day
Rows = list[dict[str, Any]]
# Per chart: the fields that name a row of a bucket, and how the parts of a bucket combine
# (counts and dollars add up; the queue's depth is a bucket's highest sample).
KEYS = {"finished": ("state",), "latency": ("le",), "cost": ("role", "outcome"),
        "depth": ("role",)}
COMBINED: dict[str, dict[str, Callable[[Any, Any], Any]]] = {
    "finished": {"n": operator.add}, "latency": {"n": operator.add},
    "cost": {"runs": operator.add, "cost_usd": operator.add, "unpriced": operator.add},
    "depth": {"ready": max, "running": max, "samples": operator.add}}
DEPTH_LABELS = ("ready", "running", "samples")


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

    def queue_depth_buckets(self, buckets: Buckets) -> Rows:
        return self._kept_and_live("depth", buckets, self._depth_live, lambda row: {
            "role": row["role"], "ready": int(row["ready"]), "running": int(row["running"]),
            "samples": int(row["samples"])}, sums="depth_sums_of")

    def finished_buckets(self, buckets: Buckets) -> Rows:
        return self._kept_and_live("finished", buckets, self._finished_live, lambda row: {
            "state": row["label"], "n": int(row["n"])})

    def latency_histogram(self, buckets: Buckets) -> Rows:
        return self._kept_and_live("latency", buckets, self._latency_live, lambda row: {
            "le": None if row["label"] == "inf" else float(row["label"]), "n": int(row["n"])})

    def cost_buckets(self, buckets: Buckets) -> Rows:
        return self._kept_and_live("cost", buckets, self._cost_live, lambda row: {
            "role": row["role"], "outcome": row["label"], "runs": int(row["n"]),
            "cost_usd": float(row["cost_usd"]), "unpriced": int(row["unpriced"])})

    def roll_up_chart_sums(self, now: float, again: float) -> int:
        spans = self._spans_to_sum(now, again)
        if spans is None:
            return 0
        mark = self._sums_mark()
        # A day at a time: each read holds the store (and a daemon's dispatch waiting on it)
        # for a day's rows, about 30 ms at a million tasks, where the week an upgrade sums
        # first took a second in one read.
        for first in range(0, spans.count, CHUNK):
            chunk = Buckets(spans.start + first * SPAN, SPAN, min(CHUNK, spans.count - first))
            self._sum_quarters(chunk, mark)
        return spans.count

    def _sum_quarters(self, spans: Buckets, mark: float | None) -> None:
        # Read first, outside the write: the write then holds the lock for a few rows only.
        rows = [{"chart": "finished", "role": "", "label": row["state"], "n": row["n"],
                 "cost_usd": 0.0, "unpriced": 0, "bucket": row["bucket"]}
                for row in self._finished_live(spans)]
        rows += [{"chart": "latency", "role": "", "n": row["n"], "cost_usd": 0.0,
                  "label": "inf" if row["le"] is None else str(row["le"]), "unpriced": 0,
                  "bucket": row["bucket"]} for row in self._latency_live(spans)]
        rows += [{"chart": "cost", "role": row["role"], "label": row["outcome"],
                  "n": row["runs"], "cost_usd": row["cost_usd"], "unpriced": row["unpriced"],
                  "bucket": row["bucket"]} for row in self._cost_live(spans)]
        rows += [{"chart": "depth", "role": row["role"], "label": label, "n": row[label],
                  "cost_usd": 0.0, "unpriced": 0, "bucket": row["bucket"]}
                 for row in self._depth_live(spans) for label in DEPTH_LABELS]
        with self._write() as db:
            db.execute(self.q["forget_chart_sums"], {
                "since": spans.start, "until": spans.until, "before": spans.until - KEEP})
            for row in rows:
                bucket = row.pop("bucket")
                if 0 <= bucket < spans.count:
                    db.execute(self.q["insert_chart_sum"],
                               row | {"at": spans.start + SPAN * bucket})
            # Summing again the quarters before the mark leaves it where it was.
            db.execute(self.q["set_chart_sums_mark"],
                       {"through": max(spans.until, mark if mark is not None else spans.until)})

    def _spans_to_sum(self, now: float, again: float) -> Buckets | None:
        """The past quarter hours to sum: those since the mark and the `again` seconds
        before it, within the week; None when there are none."""
        through = math.floor(now / SPAN) * SPAN
        mark = self._sums_mark()
        since = through - KEEP if mark is None else max(min(mark, through) - again,
                                                         through - KEEP)
        since = math.floor(since / SPAN) * SPAN
        if since >= through:
            return None
        return Buckets(since, SPAN, round((through - since) / SPAN))

    def _sums_mark(self) -> float | None:
        rows = self._all("chart_sums_mark")
        return float(rows[0]["sums_through"]) if rows else None

    def _kept_and_live(self, chart: str, buckets: Buckets, live: Callable[[Buckets], Rows],
                       kept: Callable[[Any], dict[str, Any]], sums: str = "chart_sums_of"
                       ) -> Rows:
        """Buckets made of whole quarter hours from the sums kept up to the mark, the rest
        read live by the quarter; buckets of any other width (minutes) live only. Parts of
        one bucket are added up: a row per bucket and key."""
        mark = self._sums_mark()
        if buckets.width % SPAN or buckets.start % SPAN or mark is None:
            return live(buckets)
        kept_until = min(max(mark, buckets.start), buckets.until)
        parts = [{"bucket": int(row["bucket"])} | kept(row) for row in self._all(
            sums, buckets.params() | {"until": kept_until, "chart": chart})]
        if kept_until < buckets.until:
            tail = Buckets(kept_until, SPAN, round((buckets.until - kept_until) / SPAN))
            parts += [row | {"bucket": int((tail.start + SPAN * row["bucket"] - buckets.start)
                                           // buckets.width)} for row in live(tail)]
        return _combined(parts, ("bucket", *KEYS[chart]), COMBINED[chart])

    def _depth_live(self, buckets: Buckets) -> Rows:
        return [{"bucket": int(row["bucket"]), "role": row["role"], "ready": int(row["ready"]),
                 "running": int(row["running"]), "samples": int(row["samples"])}
                for row in self._all("queue_depth_buckets", buckets.params())]

    def _finished_live(self, buckets: Buckets) -> Rows:
        return [{"bucket": int(row["bucket"]), "state": row["state"], "n": int(row["n"])}
                for row in self._all("finished_buckets", buckets.params())]

    def _latency_live(self, buckets: Buckets) -> Rows:
        first = self._first_run_from(buckets.start - CLAIM_TO_SPAWN)
        return [{"bucket": int(row["bucket"]),
                 "le": None if row["le"] is None else float(row["le"]), "n": int(row["n"])}
                for row in self._all("latency_histogram",
                                     buckets.params() | {"first_id": first})]

    def _cost_live(self, buckets: Buckets) -> Rows:
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


def _combined(parts: Rows, keys: tuple[str, ...],
              combine: dict[str, Callable[[Any, Any], Any]]) -> Rows:
    """One row per value of `keys`, each other field combined over the parts sharing them."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for part in parts:
        key = tuple(part[name] for name in keys)
        if key in found:
            row = found[key]
            for name, how in combine.items():
                row[name] = how(row[name], part[name])
        else:
            found[key] = dict(part)
    return list(found.values())
