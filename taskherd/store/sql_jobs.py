"""The job store over named SQL, shared by every dialect: a mixin of `SQLStore` that uses its
transactions and its task insert path, so a fire's task is enqueued exactly as `enqueue`
would (dedup key included)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import FINAL_FIRE_STATUSES, EventKind, FireStatus, NewTask, Run, Task
from taskherd.model.jobs import (
    STATE_COLUMNS,
    FireClaim,
    Job,
    JobDefinition,
    JobFire,
    PlannedFire,
    Upserted,
    wake_time,
)
from taskherd.policy.job_chains import AFTER, fires_after, parent_of
from taskherd.policy.queue import settle_fire
from taskherd.store.connection import Connection
from taskherd.store.jobs import JobNotFound, JobRefused, JobStore


class SQLJobs(JobStore):
    """The job store's transitions over named SQL; mixed into `SQLStore`'s dialects."""

    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _read(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: ...
        def _is_unique_error(self, error: Exception) -> bool: ...
        def _add_task(
            self, db: Connection, new: NewTask, now: float
        ) -> tuple[int | None, bool]: ...

    def upsert_job(
        self, definition: JobDefinition, *, source: str, now: float, schedule_at: float | None
    ) -> Upserted:
        try:
            return self._upsert_job(definition, source=source, now=now, schedule_at=schedule_at)
        except Exception as error:
            if not self._is_unique_error(error):
                raise
            # Another node created it between this one's read and insert (PostgreSQL, two
            # daemons syncing one config at start-up): it exists now, so this is an update.
            return self._upsert_job(definition, source=source, now=now, schedule_at=schedule_at)

    def _upsert_job(
        self, definition: JobDefinition, *, source: str, now: float, schedule_at: float | None
    ) -> Upserted:
        with self._write() as db:
            row = self._one(db, "get_job_by_name", {"name": definition.name})
            if row is None:
                return Upserted(self._insert_job(db, definition, source, now, schedule_at),
                                "created")
            job = Job.from_row(row)
            if job.source != source:
                raise JobRefused(
                    f"job {job.name!r} was made by {job.source} and is managed there "
                    f"({'taskherd.toml' if job.source == 'config' else 'taskherd jobs'})"
                )
            if job.definition().same_as(definition):
                return Upserted(job, "unchanged")
            moved = job.trigger != dict(definition.trigger) or (
                definition.enabled and not job.enabled
            )
            new_schedule = schedule_at if moved else job.schedule_at
            updated = _replace(job, schedule_at=new_schedule)
            params = _definition_params(definition) | {
                "id": job.id, "now": now, "schedule_at": new_schedule,
                "next_run_at": wake_time(updated, now),
            }
            db.execute(self.q["update_job_definition"], params)
            self._emit(EventKind.JOB_CHANGED, now, job=definition.name)
            return Upserted(self._job(db, definition.name), "updated")

    def _insert_job(self, db: Connection, definition: JobDefinition, source: str, now: float,
                    schedule_at: float | None) -> Job:
        """A new job, inside the caller's transaction (a name in use raises the dialect's
        unique error)."""
        params = _definition_params(definition) | {
            "source": source, "now": now, "schedule_at": schedule_at,
            "next_run_at": schedule_at if definition.enabled else None,
        }
        db.execute(self.q["insert_job"], params)
        self._emit(EventKind.JOB_CHANGED, now, job=definition.name)
        return self._job(db, definition.name)

    def get_job(self, name: str) -> Job:
        with self._read() as db:
            return self._job(db, name)

    def list_jobs(self, *, source: str | None = None, enabled: bool | None = None) -> list[Job]:
        params = {"source": source, "enabled": None if enabled is None else int(enabled)}
        return [Job.from_row(row) for row in self._all("list_jobs", params)]

    def due_jobs(self, now: float, limit: int) -> list[Job]:
        return [Job.from_row(row) for row in self._all("due_jobs", {"now": now, "limit": limit})]

    def claim_fires(self, claims: Sequence[FireClaim], now: float) -> list[list[JobFire] | None]:
        results: list[list[JobFire] | None] = []
        with self._write() as db:
            for claim in claims:
                results.append(self._claim_one(db, claim, now))
        return results

    def _claim_one(self, db: Connection, claim: FireClaim, now: float) -> list[JobFire] | None:
        job = claim.job
        params = _state_params(job, claim.state, now) | {"expected": job.next_run_at}
        if db.execute(self.q["claim_job_fire"], params).rowcount != 1:
            return None
        return [self._record_fire(db, job, planned, now) for planned in claim.fires]

    def settle_fires(self, now: float, limit: int = 1000) -> list[JobFire]:
        settled = []
        with self._write() as db:
            for row in db.execute(self.q["finished_open_fires"], {"limit": limit}).fetchall():
                fire = self._settle_one(db, row, now)
                if fire is None:
                    continue
                settled.append(fire)
                if fire.job_id is not None:
                    self._apply_policy(db, fire, now)
        return settled

    def set_job_enabled(
        self, name: str, enabled: bool, now: float, schedule_at: float | None = None
    ) -> Job:
        with self._write() as db:
            job = self._job(db, name)
            if job.enabled == enabled:
                return job
            changes: dict[str, Any] = {"enabled": enabled}
            if enabled:
                changes["schedule_at"] = schedule_at
            self._write_state(db, job, changes, now)
            self._emit(EventKind.JOB_CHANGED, now, job=name)
            return self._job(db, name)

    def delete_job(self, name: str, now: float) -> None:
        with self._write() as db:
            db.execute(self.q["lock_fires_of_job"], {"name": name}).fetchall()
            job_id = self._job(db, name).id
            db.execute(self.q["skip_queued_fires"],
                       {"job_id": job_id, "now": now, "error": "its job was deleted"})
            db.execute(self.q["delete_job"], {"id": job_id})
            self._emit(EventKind.JOB_CHANGED, now, job=name)

    def request_run_now(self, name: str, now: float) -> Job:
        with self._write() as db:
            job = self._job(db, name)
            if not job.enabled:
                raise JobRefused(
                    f"job {name!r} is disabled: enable it first (taskherd jobs enable)")
            self._write_state(db, job, {"run_now_at": now}, now)
            self._emit(EventKind.JOB_CHANGED, now, job=name)
            return self._job(db, name)

    def earliest_next_run(self) -> float | None:
        earliest = self._all("earliest_next_run")[0]["earliest"]
        return None if earliest is None else float(earliest)

    def list_fires(
        self, *, job: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[JobFire]:
        params = {"job_name": job, "status": status, "limit": limit}
        return [JobFire.from_row(row) for row in self._all("list_job_fires", params)]

    def get_fire(self, fire_id: int) -> JobFire:
        rows = self._all("get_job_fire", {"id": fire_id})
        if not rows:
            raise LookupError(f"no fire with id {fire_id}")
        return JobFire.from_row(rows[0])

    def runs_of_job(self, name: str, *, since: float | None = None, limit: int = 100) -> list[Run]:
        params = {"job_name": name, "since": since, "limit": limit}
        return [Run.from_row(row) for row in self._all("runs_of_job", params)]

    def prune_fires(self, before: float) -> int:
        with self._write() as db:
            return db.execute(self.q["prune_job_fires"], {"before": before}).rowcount

    # -- shared steps -------------------------------------------------------------------

    def _record_fire(
        self, db: Connection, job: Job, planned: PlannedFire, now: float
    ) -> JobFire:
        status, error, task_id = planned.status, planned.error, None
        if planned.task is not None:
            task_id, created = self._add_task(db, planned.task, now)
            if not created:
                status, error = FireStatus.SKIPPED, (f"task {task_id} with dedup key "
                                               f"{planned.task.dedup_key!r} is still open")
                task_id = None
        status = FireStatus(status).value  # the column holds the plain word
        finished_at = now if status in FINAL_FIRE_STATUSES else None
        if planned.release:
            row = _fetch_one(db, self.q["release_queued_fire"],
                             {"job_id": job.id, "task_id": task_id, "now": now, "status": status,
                              "variant": planned.variant, "error": error,
                              "finished_at": finished_at})
            if row is not None:
                self._emit(EventKind.JOB_FIRED, now, job=job.name, task_id=task_id)
                return JobFire.from_row(row)
        params = {
            "job_id": job.id, "job_name": job.name, "scheduled_for": planned.scheduled_for,
            "now": now, "kind": planned.kind, "status": status, "task_id": task_id,
            "retry_of": planned.retry_of, "retry_count": planned.retry_count,
            "variant": planned.variant, "error": error,
            "finished_at": finished_at,
        }
        fire = JobFire.from_row(_fetch_one(db, self.q["insert_job_fire"], params))
        self._emit(EventKind.JOB_FIRED, now, job=job.name, task_id=task_id)
        return fire

    def _settle_one(self, db: Connection, row: Any, now: float) -> JobFire | None:
        state, outcome = row["task_state"], row["last_outcome"]
        if state is None:
            status, error = FireStatus.ERROR, "its task was deleted before it finished"
        elif state == "completed":
            status, error = FireStatus.OK, None
        elif state == "cancelled":
            status, error = FireStatus.CANCELLED, row["task_error"]
        else:  # dead
            status = FireStatus.TIMEOUT if outcome == "timed_out" else FireStatus.ERROR
            error = row["task_error"]
        duration = None
        if row["task_finished_at"] is not None:
            started = row["started_at"]
            if started is None:
                started = row["task_finished_at"]
            duration = max(row["task_finished_at"] - started, 0.0)
        params = {"id": row["fire_id"], "status": status.value, "duration": duration,
                  "summary": row["task_summary"], "error": error, "now": now}
        fired = _fetch_one(db, self.q["settle_job_fire"], params)
        return JobFire.from_row(fired) if fired is not None else None

    def _apply_policy(self, db: Connection, fire: JobFire, now: float) -> None:
        row = _fetch_one(db, self.q["get_job_by_id"], {"id": fire.job_id})
        if row is None:
            return
        job = Job.from_row(row)
        changes = dict(settle_fire(job, fire))
        updated = _replace(job, **changes)
        spent = (job.delete_after_run and updated.schedule_at is None and updated.retry_at is None
                 and not updated.open_fires and not updated.queued and updated.run_now_at is None)
        if spent:
            db.execute(self.q["delete_job"], {"id": job.id})
        else:
            self._write_state(db, job, changes, now)
        # A retry still to come means the parent's fire has not ended for good.
        self._fire_children(db, job, fire, final="retry_at" not in changes, now=now)

    def _fire_children(self, db: Connection, job: Job, fire: JobFire, *, final: bool,
                       now: float) -> None:
        """Jobs chained after `job` whose link this settled fire satisfies fire (after their
        delay) as a run-now request of their own, in this transaction."""
        text = "\n".join(filter(None, [fire.summary, fire.error]))
        for row in db.execute(self.q["chained_jobs"], {}).fetchall():
            child = Job.from_row(row)
            link = child.template.get(AFTER)
            if link is None or parent_of(child.template) != job.name:
                continue
            if fires_after(link, fire.status, final, text):
                at = now + float(link.get("delay") or 0.0)
                self._write_state(db, child, {"run_now_at": at}, now)
                self._emit(EventKind.JOB_CHANGED, now, job=child.name)

    def clear_run_now(self, name: str, now: float) -> Job:
        """Drop a pending run-now (or chained) fire of the job."""
        with self._write() as db:
            job = self._job(db, name)
            if job.run_now_at is not None:
                self._write_state(db, job, {"run_now_at": None}, now)
            return self._job(db, name)

    def open_tasks_of_job(self, name: str) -> list[Task]:
        return [Task.from_row(row) for row in self._all("open_tasks_of_job", {"job_name": name})]

    def _write_state(
        self, db: Connection, job: Job, changes: Mapping[str, Any], now: float
    ) -> None:
        updated = _replace(job, **changes)
        state = dict(changes) | {"next_run_at": wake_time(updated, now)}
        if db.execute(self.q["write_job_state"], _state_params(job, state, now)).rowcount != 1:
            raise RuntimeError(f"job {job.name!r} changed inside a write transaction")

    def _job(self, db: Connection, name: str) -> Job:
        row = _fetch_one(db, self.q["get_job_by_name"], {"name": name})
        if row is None:
            raise JobNotFound(name)
        return Job.from_row(row)

    def _one(self, db: Connection, name: str, params: Mapping[str, Any]) -> Any:
        return _fetch_one(db, self.q[name], params)


def _state_params(job: Job, state: Mapping[str, Any], now: float) -> dict[str, Any]:
    unknown = set(state) - set(STATE_COLUMNS)
    if unknown:
        raise ValueError(f"not job state columns: {sorted(unknown)}")
    values = job.state() | dict(state)
    values["enabled"] = int(values["enabled"])
    return values | {"id": job.id, "version": job.version, "now": now}


def _replace(job: Job, **changes: Any) -> Job:
    return dataclasses.replace(job, **changes)


def _definition_params(definition: JobDefinition) -> dict[str, Any]:
    return {
        "name": definition.name,
        "template": json.dumps(definition.template, sort_keys=True),
        "trigger_spec": json.dumps(definition.trigger, sort_keys=True),
        "timezone": definition.timezone,
        "overlap": definition.overlap,
        "missed_fire": definition.missed_fire,
        "max_retries": definition.max_retries,
        "enabled": int(definition.enabled),
        "delete_after_run": int(definition.delete_after_run),
    }


def _fetch_one(db: Connection, sql: str, params: Mapping[str, Any]) -> Any:
    # Drain the cursor: a half-read RETURNING statement would keep COMMIT from finishing.
    rows = db.execute(sql, params).fetchall()
    return rows[0] if rows else None
