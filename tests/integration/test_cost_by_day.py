"""`runs cost --by day`: the database sums runs, cost and tokens per day of the fleet's zone,
daylight-saving days included (a 25-hour day keeps its last hour)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.ops import Queue
from taskherd.ops.runs import cost, day_starts
from taskherd.policy.admission import ClaimRequest
from taskherd.store import open_store

BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN).timestamp()


def run_costing(store, when: float, cost_usd: float | None, tokens: int) -> None:
    store.enqueue(NewTask(role="coder", title="t"), when)
    claim = store.claim(ClaimRequest("n1", when, 60.0))
    store.mark_spawned(claim.run.id, when, 60.0, pid=1, pid_started_at=1.0, log_path=None)
    result = RunResult(Outcome.SUCCEEDED, cost_usd=cost_usd, input_tokens=tokens,
                       output_tokens=tokens // 10)
    store.finish_run(claim.run.id, result, RetryPolicy(), when + 1)


def test_cost_per_day_in_the_fleets_zone_across_the_autumn_change(tmp_path, database):
    config = parse_config({"daemon": {"database": database, "timezone": "Europe/Berlin"},
                           "roles": {"coder": {"command": ["true"]}}}, base_dir=tmp_path)
    store = open_store(database, durability="normal")
    try:
        # 25 October 2026 lasts 25 hours in Berlin: 23:30 that evening is still that day,
        # although it is more than 24 hours after its midnight.
        run_costing(store, at("2026-10-24T23:59:00"), 1.0, 1000)
        run_costing(store, at("2026-10-25T00:01:00"), 0.25, 100)
        run_costing(store, at("2026-10-25T23:30:00"), 0.5, 200)
        run_costing(store, at("2026-10-26T00:10:00"), None, 0)  # unknown cost counts as a run
        rows = cost(Queue(config, store), "day", at("2026-10-24T00:00:00"),
                    at("2026-10-26T12:00:00"))
        everything = cost(Queue(config, store), "day", None, at("2026-10-26T12:00:00"))
        by_role = cost(Queue(config, store), "role", None, at("2026-10-26T12:00:00"))
    finally:
        store.close()
    # The run of unknown cost is counted apart, never as $0: a day of only such runs has no
    # known cost (None), and the role's sum names it beside the dollars it knows.
    assert [(r["day"], r["runs"], r["cost_usd"], r["unpriced_runs"], r["input_tokens"])
            for r in rows] == [
        ("2026-10-24", 1, 1.0, 0, 1000), ("2026-10-25", 2, 0.75, 0, 300),
        ("2026-10-26", 1, None, 1, 0)]
    assert everything == rows
    assert [(r["role"], r["runs"], r["cost_usd"], r["unpriced_runs"]) for r in by_role] == [
        ("coder", 4, 1.75, 1)]


def test_day_starts_follow_the_calendar_not_86400_seconds():
    starts = day_starts(at("2026-10-24T12:00:00"), at("2026-10-26T12:00:00"), BERLIN)
    assert [datetime.fromtimestamp(s, BERLIN).isoformat() for s in starts] == [
        "2026-10-24T00:00:00+02:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00"]
    assert starts[2] - starts[1] == 25 * 3600


def test_the_boards_spend_counts_runs_as_they_end_and_forgets_pruned_ones(database):
    store = open_store(database, durability="normal")
    try:
        start = at("2026-10-20T10:00:00")
        run_costing(store, start, 0.5, 100)
        store.enqueue(NewTask(role="coder", title="still running"), start)
        claim = store.claim(ClaimRequest("n1", start, 60.0))  # open: not counted until it ends
        [row] = store.spend_by_role(start - 86400, start - 3600)
        assert (row["runs_week"], row["cost_week"], row["runs_today"]) == (1, 0.5, 1)
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, cost_usd=0.25),
                         RetryPolicy(), start + 10)
        [row] = store.spend_by_role(start - 86400, start - 3600)
        assert (row["runs_week"], row["cost_week"]) == (2, 0.75)
        assert store.prune(before=start + 3600) == 2
        assert store.spend_by_role(start - 86400, start - 3600) == []
    finally:
        store.close()
