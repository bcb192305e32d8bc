"""A fleet's last hour, written into a store with time passed in: what the charts' API and
browser tests draw. NOW is in the middle of a minute; every moment is before it."""

from __future__ import annotations

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest

NOW = 1_800_003_630.0  # 30 s into a minute
HOUR_START = NOW - 30 - 59 * 60  # the first minute of the 1 h chart
LEASE = 3600.0


def run_task(store, role: str, at: float, outcome: Outcome = Outcome.SUCCEEDED,
             cost: float | None = 0.5, wait: float = 2.0) -> None:
    """A task added at `at`, started `wait` seconds later, finished 10 s after that."""
    store.enqueue(NewTask(role=role, title=f"{role} at {at}", max_attempts=1), at)
    claim = store.claim(ClaimRequest("n1", at + wait / 2, LEASE, roles=[role]))
    store.mark_spawned(claim.run.id, at + wait, LEASE, pid=1, pid_started_at=1.0, log_path=None)
    store.finish_run(claim.run.id, RunResult(outcome, cost_usd=cost), RetryPolicy(),
                     at + wait + 10)


def seed(store) -> dict:
    """Eight tasks run over the hour (six completed, one dead, one of unknown cost), two
    waiting, and the queue sampled every 10 minutes. Returns what the charts must show."""
    for minute in (5, 12, 20, 33, 41, 50):
        run_task(store, "coder", HOUR_START + minute * 60)
    run_task(store, "coder", HOUR_START + 44 * 60, Outcome.FAILED, cost=0.25)
    run_task(store, "qa", HOUR_START + 46 * 60, cost=None, wait=30.0)
    for n in range(2):
        store.enqueue(NewTask(role="qa", title=f"waits {n}"), HOUR_START + 55 * 60)
    for minute in range(0, 60, 10):
        store.sample_queue_depth(HOUR_START + minute * 60, ["coder", "qa"])
    return {"completed": 7, "dead": 1, "dollars": 3.25, "unpriced": 1}
