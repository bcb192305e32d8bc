"""The dashboard's chart aggregates (store/charts.py), alike on SQLite and PostgreSQL: each
counts what happened in its bucket and nothing outside the range, with `now` passed in."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store.charts import Buckets

ONE_TRY = RetryPolicy()
LEASE = 3600.0
T0 = 1_800_000_000.0  # a minute's (and an hour's) start
MINUTES = Buckets(T0, 60.0, 10)  # [T0, T0 + 600)


def started(store, role: str, *, ready_at: float, claimed_at: float, spawned_at: float | None):
    task = store.enqueue(NewTask(role=role, title=f"{role} {ready_at}", max_attempts=1),
                         ready_at).task
    claimed = store.claim(ClaimRequest("n1", claimed_at, LEASE, roles=[role]))
    assert claimed.task.id == task.id
    if spawned_at is not None:
        store.mark_spawned(claimed.run.id, spawned_at, LEASE, pid=1, pid_started_at=1.0,
                           log_path=None)
    return claimed.run


def ended(store, run, at: float, outcome: Outcome = Outcome.SUCCEEDED,
          cost: float | None = None) -> None:
    store.finish_run(run.id, RunResult(outcome, cost_usd=cost), ONE_TRY, at)


def test_finished_tasks_are_counted_in_the_bucket_and_state_they_finished_in(store):
    for at, outcome in ((T0 + 5, Outcome.SUCCEEDED), (T0 + 50, Outcome.SUCCEEDED),
                        (T0 + 70, Outcome.FAILED), (T0 - 1, Outcome.SUCCEEDED),
                        (MINUTES.until, Outcome.SUCCEEDED)):
        ended(store, started(store, "coder", ready_at=at - 3, claimed_at=at - 2,
                             spawned_at=at - 1), at, outcome)
    cancelled = store.enqueue(NewTask(role="qa", title="never run"), T0).task
    store.cancel(cancelled.id, T0 + 599)
    rows = {(row["bucket"], row["state"]): row["n"] for row in store.finished_buckets(MINUTES)}
    # Before the range (T0 - 1) and at its end (until is not in it) are not counted.
    assert rows == {(0, "completed"): 2, (1, "dead"): 1, (9, "cancelled"): 1}


def test_latency_is_a_histogram_of_the_wait_from_ready_to_the_agents_start(store):
    # Ready at T0, started 3 s later: within the 5 s bound; another 0.004 s after it was ready.
    ended(store, started(store, "coder", ready_at=T0, claimed_at=T0 + 2, spawned_at=T0 + 3),
          T0 + 4)
    started(store, "coder", ready_at=T0 + 130, claimed_at=T0 + 130.001,
            spawned_at=T0 + 130.004)
    started(store, "coder", ready_at=T0 + 140, claimed_at=T0 + 140, spawned_at=T0 + 7140)
    started(store, "coder", ready_at=T0 + 200, claimed_at=T0 + 200, spawned_at=None)
    rows = {(row["bucket"], row["le"]): row["n"] for row in store.latency_histogram(MINUTES)}
    # The run started after the range and the one never started are not in it.
    assert rows == {(0, 5.0): 1, (2, 0.005): 1}


def test_a_retry_is_not_counted_as_waiting_since_its_task_was_added(store):
    task = store.enqueue(NewTask(role="coder", title="twice", max_attempts=2), T0).task
    first = store.claim(ClaimRequest("n1", T0 + 1, LEASE, roles=["coder"])).run
    store.mark_spawned(first.id, T0 + 2, LEASE, pid=1, pid_started_at=1.0, log_path=None)
    store.finish_run(first.id, RunResult(Outcome.FAILED), RetryPolicy(backoff_base=0.0),
                     T0 + 100)
    second = store.claim(ClaimRequest("n1", T0 + 300, LEASE, roles=["coder"]))
    assert second.task.id == task.id
    store.mark_spawned(second.run.id, T0 + 301, LEASE, pid=2, pid_started_at=1.0,
                       log_path=None)
    assert store.latency_histogram(MINUTES) == [{"bucket": 0, "le": 2.5, "n": 1}]


def test_a_wait_past_the_last_bound_is_counted_apart(store):
    started(store, "coder", ready_at=T0 - 4000, claimed_at=T0 + 10, spawned_at=T0 + 11)
    assert store.latency_histogram(MINUTES) == [{"bucket": 0, "le": None, "n": 1}]


def test_cost_per_bucket_by_role_and_outcome_counts_unknown_cost_apart(store):
    ended(store, started(store, "coder", ready_at=T0, claimed_at=T0 + 1, spawned_at=T0 + 2),
          T0 + 30, cost=0.25)
    ended(store, started(store, "coder", ready_at=T0, claimed_at=T0 + 3, spawned_at=T0 + 4),
          T0 + 31, Outcome.FAILED, cost=None)
    ended(store, started(store, "qa", ready_at=T0, claimed_at=T0 + 65, spawned_at=T0 + 66),
          T0 + 70, cost=None)
    # Stopped by a rate limit: failed before any paid work, so no unknown cost.
    ended(store, started(store, "qa", ready_at=T0, claimed_at=T0 + 66, spawned_at=T0 + 67),
          T0 + 71, Outcome.RATE_LIMITED)
    started(store, "writer", ready_at=T0, claimed_at=T0 + 90, spawned_at=T0 + 91)  # running
    rows = {(row["bucket"], row["role"], row["outcome"]):
            (row["runs"], round(row["cost_usd"], 6), row["unpriced"])
            for row in store.cost_buckets(MINUTES)}
    assert rows == {(0, "coder", "succeeded"): (1, 0.25, 0), (0, "coder", "failed"): (1, 0.0, 1),
                    (1, "qa", "succeeded"): (1, 0.0, 1), (1, "qa", "rate_limited"): (1, 0.0, 0)}


def test_runs_before_a_range_are_left_out_however_many_are_kept(store):
    """The range's first run is found by id: every run claimed in it counts, none before."""
    hours = Buckets(T0, 3600.0, 24)
    for n in range(40):  # one an hour from 16 h before the range
        at = T0 + (n - 16) * 3600 + 10
        ended(store, started(store, "coder", ready_at=at, claimed_at=at, spawned_at=at + 1),
              at + 2, cost=1.0)
    rows = {row["bucket"]: row["runs"] for row in store.cost_buckets(hours)}
    assert rows == {bucket: 1 for bucket in range(24)}
    waits = {row["bucket"] for row in store.latency_histogram(hours)}
    assert waits == set(range(24))


def test_queue_depth_is_sampled_once_a_minute_across_nodes(store, reopen):
    for n in range(3):
        store.enqueue(NewTask(role="coder", title=f"waits {n}"), T0)
    store.enqueue(NewTask(role="qa", title="runs"), T0)
    store.claim(ClaimRequest("n1", T0, LEASE, roles=["qa"]))
    assert store.sample_queue_depth(T0, ["coder", "writer"]) == 3
    other = reopen()
    try:
        store.enqueue(NewTask(role="coder", title="later"), T0 + 1)
        # Another node's sample of the same minute changes nothing: the first one stays.
        assert other.sample_queue_depth(T0, ["coder"]) == 0
    finally:
        other.close()
    store.sample_queue_depth(T0 + 60, [])
    rows = {(row["bucket"], row["role"]): (row["ready"], row["running"], row["samples"])
            for row in store.queue_depth_buckets(Buckets(T0, 120.0, 2))}
    assert rows == {(0, "coder"): (4, 0, 2), (0, "qa"): (0, 1, 2), (0, "writer"): (0, 0, 1)}


def test_old_samples_are_pruned(store):
    store.sample_queue_depth(T0, ["coder"])
    store.sample_queue_depth(T0 + 60, ["coder"])
    assert store.prune_queue_samples(before=T0 + 60) == 1
    assert [row["bucket"] for row in store.queue_depth_buckets(MINUTES)] == [1]


@pytest.mark.parametrize("width", [60.0, 900.0, 3600.0])
def test_bucket_numbers_truncate_alike_in_both_dialects(store, width):
    """A finish just before a bucket's end is in that bucket, not rounded into the next."""
    end_of_first = T0 + width - 0.001
    ended(store, started(store, "coder", ready_at=T0, claimed_at=T0, spawned_at=T0),
          end_of_first)
    [row] = store.finished_buckets(Buckets(T0, width, 3))
    assert row["bucket"] == 0


HOURS = Buckets(T0, 3600.0, 6)  # six hours from T0, as the week's chart reads them
QUARTERS = Buckets(T0, 900.0, 24)  # the same, as the day's chart reads them


def all_charts(store, buckets: Buckets) -> tuple:
    def rows(found):
        return sorted(tuple(sorted(row.items(), key=lambda item: item[0])) for row in found)

    return (rows(store.finished_buckets(buckets)), rows(store.latency_histogram(buckets)),
            rows(store.cost_buckets(buckets)), rows(store.queue_depth_buckets(buckets)))


def test_quarters_summed_read_as_the_rows_read_live(store):
    for hour in range(5):
        at = T0 + hour * 3600 + 100
        ended(store, started(store, "coder", ready_at=at, claimed_at=at + 1, spawned_at=at + 2),
              at + 50, Outcome.SUCCEEDED if hour % 2 else Outcome.FAILED, cost=0.5)
        for minute in range(0, 60, 7):  # the depth sampled as the queue grows and shrinks
            if minute == 21:
                store.enqueue(NewTask(role="qa", title=f"waits {hour}"), at)
            store.sample_queue_depth(T0 + hour * 3600 + minute * 60, ["coder"])
    live, live_quarters = all_charts(store, HOURS), all_charts(store, QUARTERS)
    # Summed up to 10:30 in hour 2: before, the sums are read; after, the rows (hour 2 from
    # both, added up).
    assert store.roll_up_chart_sums(T0 + 2 * 3600 + 1810, again=0.0) == 672
    assert all_charts(store, HOURS) == live
    assert all_charts(store, QUARTERS) == live_quarters
    assert sorted(row["bucket"] for row in store.finished_buckets(HOURS)) == [0, 1, 2, 3, 4]


def test_a_run_ending_after_its_hour_was_summed_counts_when_summed_again(store):
    run = started(store, "coder", ready_at=T0, claimed_at=T0 + 10, spawned_at=T0 + 11)
    store.roll_up_chart_sums(T0 + 3600 + 5, again=86400.0)
    ended(store, run, T0 + 3600 + 60, cost=2.0)  # claimed in hour 0, ended in hour 1
    assert store.cost_buckets(HOURS) == []  # hour 0's sums were made while it ran
    # The new quarters and the day before the last mark.
    assert store.roll_up_chart_sums(T0 + 2 * 3600 + 5, again=86400.0) == 96 + 4
    assert [(row["bucket"], row["cost_usd"]) for row in store.cost_buckets(HOURS)] == [(0, 2.0)]
    # Summing the same hours again, from another node as well, changes nothing.
    store.roll_up_chart_sums(T0 + 2 * 3600 + 5, again=86400.0)
    assert len(store.cost_buckets(HOURS)) == 1


def test_a_week_is_summed_a_day_per_read(store, monkeypatch):
    """The first roll-up after an upgrade sums a week: each read covers a day at most, so a
    daemon's dispatch, waiting on the store, waits for a day's rows and not a week's."""
    read: list[int] = []
    live = store._finished_live
    monkeypatch.setattr(store, "_finished_live", lambda spans: read.append(spans.count)
                        or live(spans))
    assert store.roll_up_chart_sums(T0 + 5, again=0.0) == 672
    assert max(read) == 96 and sum(read) == 672
