"""The job store interface: jobs (schedules that create tasks) and the record of their fires.

Kept apart from the task transitions in `base.py`; `Store` inherits it, so every store has
both. The store keeps data and guards; policy (what a fire does, backoff, retries) is the
scheduler's, passed in as plain values; what a settled fire does to its job is
`queue.settle_fire`, run inside the settling transaction as `queue.settle` is for a task.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from taskherd.model import Run, Task
from taskherd.model.jobs import FireClaim, Job, JobDefinition, JobFire, Upserted
from taskherd.store.errors import StoreError


class JobNotFound(StoreError):
    def __init__(self, name: str):
        super().__init__(f"no job named {name!r}")
        self.name = name


class JobRefused(StoreError):
    """A well-formed request on a job that its state refuses (wrong source, disabled…)."""


# Given a job (fresh, inside the transaction) and one of its fires just settled, the new
# values of some state columns; the store recomputes next_run_at and deletes a spent
# delete_after_run job.
class JobStore(abc.ABC):
    """Jobs and fires. Every method takes `now` where time matters; nothing reads a clock."""

    @abc.abstractmethod
    def upsert_job(
        self, definition: JobDefinition, *, source: str, now: float, schedule_at: float | None
    ) -> Upserted:
        """Create the job, or update its definition. `schedule_at` (the trigger's next fire
        after `now`) is used when the job is new, its trigger changed or it is re-enabled;
        otherwise the schedule keeps its place. A job of another source is refused."""

    @abc.abstractmethod
    def get_job(self, name: str) -> Job: ...

    @abc.abstractmethod
    def list_jobs(self, *, source: str | None = None, enabled: bool | None = None) -> list[Job]: ...

    @abc.abstractmethod
    def due_jobs(self, now: float, limit: int) -> list[Job]:
        """Enabled jobs with next_run_at ≤ now, earliest first (an index range scan)."""

    @abc.abstractmethod
    def claim_fires(self, claims: Sequence[FireClaim], now: float) -> list[list[JobFire] | None]:
        """For each claim: compare-and-set the job's next_run_at, enqueue its tasks and record
        its fires, all or nothing; None for a claim that lost (someone else fired the job or
        changed it). One transaction for the batch, so 1,000 fires cost one commit."""

    def claim_fire(self, claim: FireClaim, now: float) -> list[JobFire] | None:
        return self.claim_fires([claim], now)[0]

    @abc.abstractmethod
    def settle_fires(self, now: float, limit: int = 1000) -> list[JobFire]:
        """Record the outcome of open fires whose task has ended (ok, error, timeout,
        cancelled; duration, summary, error) and apply the job policy (`queue.settle_fire`:
        backoff and retries, or their reset) to each fire's job."""

    @abc.abstractmethod
    def set_job_enabled(
        self, name: str, enabled: bool, now: float, schedule_at: float | None = None
    ) -> Job:
        """Enabling restarts the schedule at `schedule_at`: fires missed while disabled are
        not caught up."""

    @abc.abstractmethod
    def delete_job(self, name: str, now: float) -> None:
        """Delete the job; its fire history is kept (by job name), its queued fires skipped."""

    @abc.abstractmethod
    def request_run_now(self, name: str, now: float) -> Job:
        """Fire the job at the next tick, leaving its schedule where it is."""

    @abc.abstractmethod
    def clear_run_now(self, name: str, now: float) -> Job:
        """Drop a pending run-now (or chained) fire of the job."""

    @abc.abstractmethod
    def open_tasks_of_job(self, name: str) -> list[Task]:
        """The job's tasks not yet finished."""

    @abc.abstractmethod
    def earliest_next_run(self) -> float | None: ...

    @abc.abstractmethod
    def list_fires(
        self, *, job: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[JobFire]: ...

    @abc.abstractmethod
    def get_fire(self, fire_id: int) -> JobFire: ...

    @abc.abstractmethod
    def runs_of_job(self, name: str, *, since: float | None = None,
                    limit: int = 100) -> list[Run]:
        """Runs of the tasks the job's fires made, newest first."""

    @abc.abstractmethod
    def prune_fires(self, before: float) -> int:
        """Delete finished fire records that finished before `before`."""
