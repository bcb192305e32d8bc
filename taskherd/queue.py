"""Queue policy on top of the store: backoff, strikes, the dead-letter set and the caps on
retries that are not strikes (DESIGN §2). Pure: the store calls `settle` inside the
transaction that ends a run, so the decision and the write are one."""

from __future__ import annotations

from dataclasses import dataclass

from taskherd.model import STRIKE_OUTCOMES, Outcome, RunResult, Task, TaskState

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_BASE = 15.0  # seconds before the first retry
DEFAULT_BACKOFF_CAP = 15 * 60.0
# Rescues of leases and rate limits are not strikes, but each is capped so nothing loops
# forever: the seeds' WQ-719 retried 319 times against a rate limit.
DEFAULT_MAX_RESCUES = 10
DEFAULT_MAX_RATE_LIMITS = 5
RATE_LIMIT_WINDOW = 24 * 3600.0
DEFAULT_RATE_LIMIT_COOLDOWN = 3600.0


@dataclass(frozen=True)
class RetryPolicy:
    """How a role's failed runs are retried. Defaults: 15 s × 2^(n−1), capped at 15 min."""

    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    max_rescues: int = DEFAULT_MAX_RESCUES
    max_rate_limits: int = DEFAULT_MAX_RATE_LIMITS
    # The span in which rate-limited runs count towards max_rate_limits.
    rate_limit_window: float = RATE_LIMIT_WINDOW
    rate_limit_cooldown: float = DEFAULT_RATE_LIMIT_COOLDOWN

    def backoff(self, strikes: int) -> float:
        """Seconds to wait before the retry that follows the `strikes`-th strike."""
        exponent = max(strikes - 1, 0)
        # Cap the exponent too: 2**2000 would overflow a float long before the cap applies.
        return min(self.backoff_base * 2 ** min(exponent, 64), self.backoff_cap)


@dataclass(frozen=True)
class Settlement:
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
    if outcome is Outcome.SUCCEEDED:
        state = TaskState.NEEDS_REVIEW if task.review else TaskState.COMPLETED
        return Settlement(state, now)
    if outcome is Outcome.BLOCKED:
        return Settlement(TaskState.BLOCKED, now, reason=result.summary or result.error)
    if outcome is Outcome.CANCELLED:
        return Settlement(TaskState.CANCELLED, now, reason=result.error)
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
