"""Queue policy on top of the store: backoff, strikes, the dead-letter set and the caps on
retries that are not strikes; a job's backoff and retries after a failed fire. Pure: the store
calls `settle` inside the transaction that ends a run, and `settle_fire` inside the one that
records a fire's end, so each decision and its write are one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskherd.model import (
    BLOCKING_OUTCOMES,
    STRIKE_OUTCOMES,
    FireStatus,
    Outcome,
    Run,
    RunResult,
    Task,
    TaskState,
)
from taskherd.model.record import Record
from taskherd.model.settings import RetryPolicy

if TYPE_CHECKING:  # the store imports this module: its records are only named here
    from taskherd.model.jobs import Job, JobFire

DEFAULT_MAX_ATTEMPTS = 3
# Consecutive failures → delay of the job's next scheduled fire (the seeds' cron dispatcher:
# a broken job fired every cycle and burnt tokens on every one of them).
FAILURE_BACKOFF = (30.0, 60.0, 300.0, 900.0, 3600.0)
RETRY_BASE = 30.0  # seconds before a failed fire's first retry (max_retries), doubling after


class Settlement(Record):
    """The task transition a finished run leads to."""

    state: TaskState
    run_after: float
    strike: int = 0
    rescue: int = 0
    rate_limit: int = 0
    reason: str | None = None


def settle(
    task: Task,
    result: RunResult,
    policy: RetryPolicy,
    now: float,
    recent_rate_limits: int = 0,
) -> Settlement:
    """Decide where `task` goes after a run ended with `result`.

    `recent_rate_limits` counts the task's rate-limited runs within `policy.rate_limit_window`
    before this one.
    """
    outcome = result.outcome
    if outcome is Outcome.SUCCEEDED and task.review:
        return Settlement(TaskState.NEEDS_REVIEW, now)
    plain = plain_settlement(result, now)
    if plain is not None:
        return plain
    if outcome is Outcome.RATE_LIMITED:
        return _after_rate_limit(result, policy, now, recent_rate_limits)
    if outcome is Outcome.LOST:
        if task.rescues + 1 > policy.max_rescues:
            reason = f"lease lost {task.rescues + 1} times (cap {policy.max_rescues})"
            return Settlement(TaskState.DEAD, now, rescue=1, reason=reason)
        return Settlement(TaskState.READY, now, rescue=1)
    assert outcome in STRIKE_OUTCOMES, outcome
    strikes = task.attempts + 1
    if strikes >= task.max_attempts:
        reason = f"{outcome.value} on attempt {strikes} of {task.max_attempts}"
        return Settlement(TaskState.DEAD, now, strike=1, reason=reason)
    return Settlement(TaskState.READY, now + policy.backoff(strikes), strike=1)


def plain_settlement(result: RunResult, now: float) -> Settlement | None:
    """Where `result` takes a task that awaits no review, whatever the task's counts; None
    when its counts decide (a strike, a rescue, a rate limit). `settle` begins with it, and
    PostgreSQL's one-call finish settles with it before reading the task."""
    outcome = result.outcome
    if outcome is Outcome.SUCCEEDED:
        return Settlement(TaskState.COMPLETED, now)
    if outcome in BLOCKING_OUTCOMES:
        # needs_input: the question the agent waits at is the reason a person reads.
        return Settlement(TaskState.BLOCKED, now, reason=result.summary or result.error)
    if outcome is Outcome.CANCELLED:
        return Settlement(TaskState.CANCELLED, now, reason=result.error)
    if result.fault is not None:
        # The machine's fault (faults.py: a full disk), not the agent's: back in the queue as
        # it was, no strike and no counter. Nothing loops: the node that met it starts nothing
        # until a probe shows the fault gone.
        return Settlement(TaskState.READY, now)
    return None


def rescued_result(run: Run, lost: RunResult, policy: RetryPolicy) -> RunResult:
    """What a run a rescue ends (its node went down, its lease expired, its spawn was never
    recorded) really ended as.

    A rescue cannot see the agent, but the agent's own report through its run credential
    (`taskherd done|fail|block`) is in the store whichever node died: an agent that finished
    and said so before its node went down, even before its spawn was recorded, is settled as
    it said, not run a second time (a second deploy, a second push). Only a run with no
    report is `lost`, and its task runs again. `lost.error` (which node, why) stays on the
    run's record either way.
    """
    said = f"{lost.error}; settled by its agent's own report" if lost.error else None
    if run.report == "done" and policy.rescue_trusts_done:
        return RunResult(Outcome.SUCCEEDED, summary=run.report_summary, error=said)
    if run.report == "block":
        return RunResult(Outcome.BLOCKED, summary=run.report_summary, error=said)
    if run.report == "fail":
        return RunResult(Outcome.FAILED, error=run.report_summary or "the agent reported failure")
    return lost


def _after_rate_limit(
    result: RunResult, policy: RetryPolicy, now: float, recent_rate_limits: int
) -> Settlement:
    if recent_rate_limits + 1 >= policy.max_rate_limits:
        reason = (f"rate-limited {recent_rate_limits + 1} times in "
                  f"{_hours(policy.rate_limit_window)}")
        return Settlement(TaskState.DEAD, now, rate_limit=1, reason=reason)
    # Ready at once: the runtime's cooldown holds every task of it, and `taskherd cooldown
    # clear` must release them all, not leave this one waiting for the old reset time.
    return Settlement(TaskState.READY, now, rate_limit=1)


def _hours(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:g} h" if hours >= 1 else f"{seconds:g} s"


def failure_backoff(failures: int) -> float:
    return FAILURE_BACKOFF[min(failures, len(FAILURE_BACKOFF)) - 1] if failures > 0 else 0.0


def retry_delay(retry_number: int) -> float:
    """Delay before retry n (1-based): 30 s × 2^(n−1)."""
    return float(RETRY_BASE * 2 ** (retry_number - 1))


def settle_fire(job: Job, fire: JobFire) -> Mapping[str, Any]:
    """The job's consequences of one settled fire: backoff and retries, or their reset."""
    if fire.status == FireStatus.OK:
        return {"failures": 0, "backoff_until": None}
    if fire.status not in (FireStatus.ERROR, FireStatus.TIMEOUT):
        return {}  # cancelled by a person: neither a failure nor a success
    ended = fire.finished_at if fire.finished_at is not None else fire.fired_at
    failures = job.failures + 1
    changes: dict[str, Any] = {"failures": failures,
                               "backoff_until": ended + failure_backoff(failures)}
    if fire.retry_count < job.max_retries:
        number = fire.retry_count + 1
        changes.update(retry_at=ended + retry_delay(number), retry_of=fire.id,
                       retry_count=number)
    return changes
