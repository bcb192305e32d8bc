"""The charts' ranges and quantiles (ops/charts.py), with `now` passed in: each range is cut
into whole buckets ending with the one that holds now, and a latency quantile is read from
its histogram as Prometheus reads one."""

from __future__ import annotations

import pytest

from taskherd.ops import BadInput
from taskherd.ops.charts import buckets_of, quantile, ranges_asked

NOW = 1_800_000_000.0 + 3600 * 5 + 61.5  # 05:01:01.5 past an hour's start


@pytest.mark.parametrize(("name", "width", "count"),
                         [("1h", 60, 60), ("24h", 900, 96), ("7d", 3600, 168)])
def test_a_range_ends_with_the_bucket_holding_now(name, width, count):
    buckets = buckets_of(name, NOW)
    assert (buckets.width, buckets.count) == (width, count)
    assert buckets.start % width == 0
    assert buckets.until - width <= NOW < buckets.until


def test_a_quantile_is_interpolated_within_its_bucket():
    # 10 waits up to 1 s, 10 more between 1 and 5 s: the median is 1 s, p95 near 5 s.
    histogram = {1.0: 10, 5.0: 10}
    assert quantile(histogram, 0.5) == 1.0
    assert quantile(histogram, 0.95) == pytest.approx(1 + 4 * 0.9)
    assert quantile({0.5: 4}, 0.5) == 0.25  # from 0 to the first bound


def test_a_quantile_past_the_last_bound_reads_as_that_bound_and_none_when_empty():
    assert quantile({3600.0: 1, None: 9}, 0.95) == 3600.0
    assert quantile({}, 0.5) is None


def test_ranges_come_from_the_address_and_a_wrong_one_is_named():
    assert ranges_asked([("cost", "7d"), ("fragment", "1")], ignored=["fragment"]) == {
        "finished": "24h", "latency": "24h", "depth": "24h", "cost": "7d"}
    with pytest.raises(BadInput, match="cost = '2d': expected one of 1h, 24h, 7d"):
        ranges_asked([("cost", "2d")])
    with pytest.raises(BadInput, match="'tasks' is not a chart"):
        ranges_asked([("tasks", "1h")])
