"""The dashboard's charts, as the /charts page and GET /v1/charts/NAME both read them: tasks
finished per bucket, ready → exec latency, queue depth by role and cost by role, over the
last hour, day or week.

Each range is cut into buckets of a fixed width, so every range draws 60-170 points: 1 h by
the minute (60), 24 h by the quarter hour (96), 7 d by the hour (168); the last bucket holds
`now` and is still filling. Sums come from the store's aggregates (`store/charts.py`), never
from rows read into Python; a bucket nothing was measured in is None (a gap), not 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from taskherd.ops import BadInput, Queue
from taskherd.store.charts import Buckets

# range: (seconds shown, seconds a bucket)
RANGES = {"1h": (3600, 60), "24h": (86400, 900), "7d": (7 * 86400, 3600)}
DEFAULT_RANGE = "24h"
CHARTS = ("finished", "latency", "depth", "cost")
TITLES = {"finished": "Tasks finished", "latency": "Ready → exec latency",
          "depth": "Queue depth by role", "cost": "Cost by role"}
FINAL_STATES = ("completed", "dead", "cancelled")


def buckets_of(range_name: str, now: float) -> Buckets:
    """The buckets of `range_name` ending with the one that holds `now`."""
    if range_name not in RANGES:
        raise BadInput(f"range {range_name!r}: expected one of {', '.join(RANGES)}")
    span, width = RANGES[range_name]
    count = span // width
    holding_now = math.floor(now / width) * width
    return Buckets(float(holding_now - (count - 1) * width), float(width), count)


def ranges_asked(params: Iterable[tuple[str, str]], ignored: Iterable[str] = ()
                 ) -> dict[str, str]:
    """Each chart's range as a page's address gives it (`?latency=7d`), DEFAULT_RANGE for a
    chart it does not name; BadInput for a key that is no chart or a range that is no range."""
    chosen = dict.fromkeys(CHARTS, DEFAULT_RANGE)
    skipped = set(ignored)
    for key, value in params:
        if key in skipped:
            continue
        if key not in CHARTS:
            raise BadInput(f"{key!r} is not a chart: use {', '.join(CHARTS)} (each =1h, 24h "
                           f"or 7d)")
        if value not in RANGES:
            raise BadInput(f"{key} = {value!r}: expected one of {', '.join(RANGES)}")
        chosen[key] = value
    return chosen


def chart(queue: Queue, name: str, range_name: str, now: float) -> dict[str, Any]:
    """One chart over one range: its bucket times (each bucket's start, unix seconds) and its
    series of values, one value a bucket; BadInput for a chart or range that is not one."""
    if name not in CHARTS:
        raise BadInput(f"chart {name!r}: expected one of {', '.join(CHARTS)}")
    buckets = buckets_of(range_name, now)
    read = {"finished": _finished, "latency": _latency, "depth": _depth, "cost": _cost}[name]
    return {"chart": name, "title": TITLES[name], "range": range_name,
            "bucket_seconds": int(buckets.width), "from_at": buckets.start,
            "until_at": buckets.until, "times": buckets.times(), **read(queue, buckets)}


def _finished(queue: Queue, buckets: Buckets) -> dict[str, Any]:
    """Per final state: completed, dead (failed for good: attempts spent), cancelled."""
    values = {state: [0] * buckets.count for state in FINAL_STATES}
    for row in queue.store.finished_buckets(buckets):
        if row["state"] in values and 0 <= row["bucket"] < buckets.count:
            values[row["state"]][row["bucket"]] += row["n"]
    return {"series": [{"name": state, "values": values[state]} for state in FINAL_STATES],
            "totals": {state: sum(values[state]) for state in FINAL_STATES}}


def _latency(queue: Queue, buckets: Buckets) -> dict[str, Any]:
    """p50 and p95 of the wait from ready to the agent's start, per bucket of starts, and
    how many runs started; None where none did."""
    histograms: list[dict[float | None, int]] = [defaultdict(int) for _ in range(buckets.count)]
    for row in queue.store.latency_histogram(buckets):
        if 0 <= row["bucket"] < buckets.count:
            histograms[row["bucket"]][row["le"]] += row["n"]
    whole: dict[float | None, int] = defaultdict(int)
    for histogram in histograms:
        for le, n in histogram.items():
            whole[le] += n
    return {"series": [{"name": "p50", "values": [quantile(h, 0.5) for h in histograms]},
                       {"name": "p95", "values": [quantile(h, 0.95) for h in histograms]}],
            "runs": [sum(h.values()) for h in histograms], "unit": "seconds",
            "overall": {"p50": quantile(whole, 0.5), "p95": quantile(whole, 0.95)}}


def quantile(histogram: dict[float | None, int], fraction: float) -> float | None:
    """The `fraction` quantile of a histogram {upper bound: count} (None: above the last
    bound), interpolated within its bucket as Prometheus' histogram_quantile does; a quantile
    above the last bound reads as that bound (the wait is at least that). None: empty."""
    total = sum(histogram.values())
    if not total:
        return None
    bounds = sorted(le for le in histogram if le is not None)
    wanted, below, lower = fraction * total, 0, 0.0
    for bound in bounds:
        count = histogram[bound]
        if count and below + count >= wanted:
            return round(lower + (bound - lower) * (wanted - below) / count, 6)
        below, lower = below + count, bound
    return lower


def _depth(queue: Queue, buckets: Buckets) -> dict[str, Any]:
    """Per role, the most tasks ready (waiting for a slot) and held (claimed or running) in
    any minute sampled in the bucket; None where no minute was sampled (no daemon was up)."""
    ready: dict[str, list[int | None]] = {}
    running: dict[str, list[int | None]] = {}
    sampled = [0] * buckets.count
    for row in queue.store.queue_depth_buckets(buckets):
        i = row["bucket"]
        if not 0 <= i < buckets.count:
            continue
        ready.setdefault(row["role"], [None] * buckets.count)[i] = row["ready"]
        running.setdefault(row["role"], [None] * buckets.count)[i] = row["running"]
        sampled[i] = max(sampled[i], row["samples"])
    roles = sorted(ready)
    return {"series": [{"name": role, "values": ready[role]} for role in roles],
            "running": [{"name": role, "values": running[role]} for role in roles],
            "samples": sampled}


def _cost(queue: Queue, buckets: Buckets) -> dict[str, Any]:
    """Per role, the known dollars of the runs claimed in each bucket and how many had no
    known cost (`unpriced`: counted apart, never summed as $0); the range's totals by role and
    outcome beside."""
    dollars: dict[str, list[float]] = {}
    unpriced: dict[str, list[int]] = {}
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    for row in queue.store.cost_buckets(buckets):
        i, role = row["bucket"], row["role"]
        if not 0 <= i < buckets.count:
            continue
        dollars.setdefault(role, [0.0] * buckets.count)[i] += row["cost_usd"]
        unpriced.setdefault(role, [0] * buckets.count)[i] += row["unpriced"]
        total = totals.setdefault((role, row["outcome"]), {
            "role": role, "outcome": row["outcome"], "runs": 0, "cost_usd": 0.0,
            "unpriced_runs": 0})
        total["runs"] += row["runs"]
        total["cost_usd"] += row["cost_usd"]
        total["unpriced_runs"] += row["unpriced"]
    roles = sorted(dollars)
    return {"series": [{"name": role, "values": [round(v, 6) for v in dollars[role]]}
                       for role in roles],
            "unpriced": [{"name": role, "values": unpriced[role]} for role in roles],
            "by_outcome": [totals[key] for key in sorted(totals)], "unit": "USD"}
