"""A run whose cost is unknown is never summed as $0: every sum of cost the store makes (the
board's spend, /metrics' totals, the cost chart's hours, `runs cost --by day`) counts such
runs apart, whether read live, rolled up by the monitor, added by a run ending behind the
mark, or folded into the totals of pruned runs."""

from __future__ import annotations

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest

ONE_TRY = RetryPolicy()
LEASE = 60.0
T0 = 1_800_000_000.0  # an hour's start


def start(store, role: str, now: float, *, spawn: bool = True):
    store.enqueue(NewTask(role=role, title=f"{role} at {now}", max_attempts=1), now)
    claimed = store.claim(ClaimRequest("n1", now, LEASE, roles=[role]))
    if spawn:
        store.mark_spawned(claimed.run.id, now, LEASE, pid=1, pid_started_at=1.0,
                           log_path=None)
    return claimed.run


def end(store, run, now: float, cost: float | None, outcome: Outcome = Outcome.SUCCEEDED):
    store.finish_run(run.id, RunResult(outcome, cost_usd=cost), ONE_TRY, now)


def sums(store) -> dict:
    """Per role, as every door reads it: (dollars, unpriced) of the board's week and day, of
    /metrics' ended runs, and of the dashboard's cost chart."""
    board = {row["role"]: (round(row["cost_week"], 5), row["unpriced_week"],
                           row["unpriced_today"])
             for row in store.spend_by_role(T0 - 86400, T0)}
    metrics: dict = {}
    for row in store.run_totals():
        if row["outcome"] is not None:
            dollars, unknown = metrics.get(row["role"], (0.0, 0))
            metrics[row["role"]] = (round(dollars + row["cost_usd"], 5), unknown + row["unpriced"])
    chart: dict = {}
    for row in store.spend_since(T0 - 3600):
        dollars, unknown = chart.get(row["role"], (0.0, 0))
        chart[row["role"]] = (round(dollars + row["cost_usd"], 5), unknown + row["unpriced"])
    return {"board": board, "metrics": metrics, "chart": chart}


def expect(dollars: float, unpriced: int) -> dict:
    return {"board": {"coder": (dollars, unpriced, unpriced)},
            "metrics": {"coder": (dollars, unpriced)}, "chart": {"coder": (dollars, unpriced)}}


def test_unknown_cost_is_counted_apart_live_rolled_up_behind_the_mark_and_pruned(store):
    end(store, start(store, "coder", T0 + 10), T0 + 11, 0.5)
    long_run = start(store, "coder", T0 + 20)  # open: it holds the runs' mark back
    end(store, start(store, "coder", T0 + 30), T0 + 31, None)  # unknown: counted apart
    # Not unknown, $0 for sure: it never started, or a rate limit refused it before any work.
    end(store, start(store, "coder", T0 + 40, spawn=False), T0 + 41, None, Outcome.FAILED)
    end(store, start(store, "coder", T0 + 50), T0 + 51, None, Outcome.RATE_LIMITED)
    assert sums(store) == expect(0.5, 1)

    store.roll_up(T0 + 3600)
    assert sums(store) == expect(0.5, 1)
    # It ends after the roll-up passed the runs after it: it adds itself (the trigger).
    end(store, long_run, T0 + 3700, None)
    assert sums(store) == expect(0.5, 2)
    store.roll_up(T0 + 7200)
    assert sums(store) == expect(0.5, 2)

    store.prune(before=T0 + 8000)
    # Only the rate-limited run is kept (its task went back to the queue): no unknown cost.
    assert sums(store)["board"] == {"coder": (0.0, 0, 0)}
    # /metrics' counters keep what was pruned, the unknown runs included.
    assert sums(store)["metrics"] == {"coder": (0.5, 2)}


def test_a_day_of_only_unknown_cost_has_no_dollars_but_a_count(store):
    end(store, start(store, "coder", T0 + 10), T0 + 11, None)
    end(store, start(store, "coder", T0 + 20), T0 + 21, None)
    rows = store.cost_by_day([T0], T0)
    assert [(r["runs"], r["cost_usd"], r["unpriced_runs"]) for r in rows] == [(2, 0.0, 2)]
