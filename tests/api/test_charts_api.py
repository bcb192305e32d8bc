"""GET /v1/charts/NAME: each chart of the dashboard as JSON over 1 h / 24 h / 7 d, read from
the store's aggregates, with the range's times and a value a bucket; wrong input refused."""

from __future__ import annotations

import pytest

from tests.api.chart_data import HOUR_START, NOW, seed
from tests.api_server import served


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with served(tmp_path_factory.mktemp("charts"), now=NOW, clock=lambda: NOW) as running:
        running.expected = seed(running.queue.store)
        yield running


def get(api, path: str):
    with api.client("read") as client:
        return client.get(path)


def test_tasks_finished_per_minute_over_the_last_hour(api):
    data = get(api, "/v1/charts/finished?range=1h").json()
    assert data["bucket_seconds"] == 60 and len(data["times"]) == 60
    assert data["times"][0] == HOUR_START and data["times"][-1] == NOW - 30
    assert data["from_at_iso"].endswith("+00:00")
    completed, dead, cancelled = (series["values"] for series in data["series"])
    assert sum(completed) == api.expected["completed"] and sum(dead) == api.expected["dead"]
    assert completed[5] == 1  # added at minute 5, finished 12 s later
    assert data["totals"] == {"completed": 7, "dead": 1, "cancelled": 0}


@pytest.mark.parametrize(("range_name", "points"), [("1h", 60), ("24h", 96), ("7d", 168)])
def test_each_range_draws_between_60_and_170_points(api, range_name, points):
    data = get(api, f"/v1/charts/finished?range={range_name}").json()
    assert len(data["times"]) == points == len(data["series"][0]["values"])
    assert sum(data["totals"].values()) == 8  # the same hour, in every range
    assert data["until_at"] == data["times"][-1] + data["bucket_seconds"] > NOW


def test_latency_gives_p50_and_p95_where_runs_started(api):
    data = get(api, "/v1/charts/latency?range=1h").json()
    p50, p95 = (series["values"] for series in data["series"])
    assert sum(data["runs"]) == 8
    assert 1.0 < p50[5] <= 2.5 and p95[46] > 10  # the qa task waited 30 s
    assert p50[6] is None  # no run started then: a gap, not 0
    assert 1.0 < data["overall"]["p50"] <= 2.5


def test_queue_depth_by_role_from_the_samples(api):
    data = get(api, "/v1/charts/depth?range=1h").json()
    ready = {series["name"]: series["values"] for series in data["series"]}
    assert set(ready) == {"coder", "qa"}
    # Sampled (after the seeding) every 10 minutes: a minute not sampled is a gap.
    assert ready["qa"][50] == 2 and ready["coder"][50] == 0 and ready["qa"][1] is None
    assert data["samples"][:11] == [1] + [0] * 9 + [1]


def test_cost_by_role_and_outcome_counts_unknown_cost_apart(api):
    data = get(api, "/v1/charts/cost?range=24h").json()
    dollars = {series["name"]: sum(series["values"]) for series in data["series"]}
    assert dollars == {"coder": 3.25, "qa": 0.0}  # the qa run's unknown cost is not $0 ...
    unknown = {series["name"]: sum(series["values"]) for series in data["unpriced"]}
    assert unknown == {"coder": 0, "qa": 1}  # ... it is counted apart
    assert {(row["role"], row["outcome"]): (row["runs"], row["unpriced_runs"])
            for row in data["by_outcome"]} == {("coder", "failed"): (1, 0),
                                               ("coder", "succeeded"): (6, 0),
                                               ("qa", "succeeded"): (1, 1)}


def test_wrong_chart_range_or_token_is_refused_with_a_reason(api):
    wrong_range = get(api, "/v1/charts/finished?range=2h")
    assert wrong_range.status_code == 422 and "1h, 24h, 7d" in wrong_range.json()["error"]
    no_chart = get(api, "/v1/charts/nothing")
    assert no_chart.status_code == 404 and "finished" in no_chart.json()["error"]
    with api.client() as anonymous:
        assert anonymous.get("/v1/charts/finished").status_code == 401
