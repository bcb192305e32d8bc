"""Jobs (schedules that create tasks) and the records of their fires, as the store keeps them
and the scheduler, the doors and the rules read them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from taskherd.model import FireStatus, NewTask, row_fields
from taskherd.model.record import Record

# The job columns a claim or a settle may change (the definition is changed by upsert_job).
STATE_COLUMNS = (
    "next_run_at", "schedule_at", "backoff_until", "failures", "variant_cursor", "queued",
    "run_now_at", "retry_at", "retry_of", "retry_count", "enabled",
)


class JobDefinition(Record):
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


class Job(Record):
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


class JobFire(Record):
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


class PlannedFire(Record):
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


class FireClaim(Record):
    """A claim on one due job: `job` as read (its next_run_at and version guard the claim),
    the job's new state columns, and the fires to record."""

    job: Job
    state: Mapping[str, Any]
    fires: Sequence[PlannedFire] = field(default_factory=tuple)


class Upserted(Record):
    job: Job
    change: str  # created, updated or unchanged

