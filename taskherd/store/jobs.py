"""The job store interface: jobs (schedules that create tasks) and the record of their fires.

Kept apart from the task transitions in `base.py`; `Store` inherits it, so every store has
both. The store keeps data and guards; policy (what a fire does, backoff, retries) is the
scheduler's, passed in as plain values; what a settled fire does to its job is
`queue.settle_fire`, run inside the settling transaction as `queue.settle` is for a task.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from taskherd.model import FireStatus, NewTask, row_fields
from taskherd.store.errors import StoreError

# The job columns a claim or a settle may change (the definition is changed by upsert_job).
STATE_COLUMNS = (
    "next_run_at", "schedule_at", "backoff_until", "failures", "variant_cursor", "queued",
    "run_now_at", "retry_at", "retry_of", "retry_count", "enabled",
)


class JobNotFound(StoreError):
    def __init__(self, name: str):
        super().__init__(f"no job named {name!r}")
        self.name = name


class JobRefused(StoreError):
    """A well-formed request on a job that its state refuses (wrong source, disabled…)."""


@dataclass(frozen=True)
class JobDefinition:
    """What a person defines (a [[jobs]] table or `taskherd jobs add`), as plain data."""

    name: str
    template: Mapping[str, Any]  # task fields, plus `variants`
    trigger: Mapping[str, Any]  # schedules' to_spec(): the trigger and its timezone
    timezone: str
    overlap: str = "skip"
    missed_fire: str = "once"
    max_retries: int = 0
    delete_after_run: bool = False
    enabled: bool = True

    def same_as(self, other: JobDefinition) -> bool:
        return _canonical(self) == _canonical(other)


def _canonical(definition: JobDefinition) -> str:
    return json.dumps(definition.__dict__, sort_keys=True, default=str)


@dataclass(frozen=True)
class Job:
    id: int
    name: str
    template: dict[str, Any]
    trigger: dict[str, Any]
    timezone: str
    overlap: str
    missed_fire: str
    max_retries: int
    enabled: bool
    source: str
    delete_after_run: bool
    next_run_at: float | None
    schedule_at: float | None
    backoff_until: float | None
    failures: int
    variant_cursor: int
    queued: int
    run_now_at: float | None
    retry_at: float | None
    retry_of: int | None
    retry_count: int
    version: int
    created_at: float
    updated_at: float
    open_fires: int = 0  # fires whose task is still open (read with the row)
    open_task_id: int | None = None
    retry_variant: int | None = None  # the variant of the fire a pending retry repeats
    # The planned time of the held fire (overlap = queue) the next release hands its task to;
    # read only while a release can happen: fires held and none open.
    release_for: float | None = None

    @classmethod
    def from_row(cls, row: Any) -> Job:
        data = row_fields(row)
        data["template"] = json.loads(data["template"])
        data["trigger"] = json.loads(data.pop("trigger_spec"))
        data["enabled"] = bool(data["enabled"])
        data["delete_after_run"] = bool(data["delete_after_run"])
        return cls(**data)

    def definition(self) -> JobDefinition:
        return JobDefinition(
            self.name, self.template, self.trigger, self.timezone, self.overlap,
            self.missed_fire, self.max_retries, self.delete_after_run, self.enabled,
        )

    def state(self) -> dict[str, Any]:
        return {column: getattr(self, column) for column in STATE_COLUMNS}

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def wake_time(job: Job, now: float) -> float | None:
    """When the scheduler must next look at `job` (its `next_run_at`), or None for never.

    Failure backoff pushes the schedule back but not a retry or a person's run-now; a queued
    fire is due at once when no task of the job is open.
    """
    times = [t for t in (job.run_now_at, job.retry_at) if t is not None]
    if job.schedule_at is not None:
        times.append(max(job.schedule_at, job.backoff_until or job.schedule_at))
    if job.queued and not job.open_fires:
        times.append(now)
    return min(times, default=None)


@dataclass(frozen=True)
class JobFire:
    id: int
    job_id: int | None
    job_name: str
    scheduled_for: float
    fired_at: float
    kind: str
    status: str
    task_id: int | None
    retry_of: int | None
    retry_count: int
    variant: int | None
    duration: float | None
    summary: str | None
    error: str | None
    finished_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> JobFire:
        return cls(**row_fields(row))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PlannedFire:
    """One fire the scheduler decided on; the store records it (and makes its task)."""

    scheduled_for: float
    kind: str  # schedule, catch_up, retry or run_now
    task: NewTask | None = None  # the task to enqueue; None for a fire that makes none
    status: str = FireStatus.OPEN  # open (with a task), queued, skipped or error
    error: str | None = None
    retry_of: int | None = None
    retry_count: int = 0
    variant: int | None = None
    release: bool = False  # the task goes to the job's oldest queued fire, not a new record


@dataclass(frozen=True)
class FireClaim:
    """A claim on one due job: `job` as read (its next_run_at and version guard the claim),
    the job's new state columns, and the fires to record."""

    job: Job
    state: Mapping[str, Any]
    fires: Sequence[PlannedFire] = field(default_factory=tuple)


@dataclass(frozen=True)
class Upserted:
    job: Job
    change: str  # created, updated or unchanged


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
    def earliest_next_run(self) -> float | None: ...

    @abc.abstractmethod
    def list_fires(
        self, *, job: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[JobFire]: ...

    @abc.abstractmethod
    def get_fire(self, fire_id: int) -> JobFire: ...

    @abc.abstractmethod
    def runs_of_job(self, name: str, *, since: float | None = None, limit: int = 100) -> list:
        """Runs of the tasks the job's fires made, newest first."""

    @abc.abstractmethod
    def prune_fires(self, before: float) -> int:
        """Delete finished fire records that finished before `before`."""
