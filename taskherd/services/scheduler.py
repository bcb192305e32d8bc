"""The scheduler service: due jobs → tasks. A fire creates a task, never an agent.

One shape with the other services: a frozen settings dataclass, `run_once(now) -> counts`,
and a thin loop in the daemon that sleeps until `next_wake(now)` or a nudge. Each pass:

1. settle: fires whose task has ended get their outcome (ok, error, timeout, cancelled) and
   their job its consequences: failure backoff (30 s, 1 min, 5 min, 15 min, 60 min, reset on
   success) and retries (30 s × 2^(n−1), lineage in retry_of / retry_count);
2. fire: every job with next_run_at ≤ now is planned (run-now, a due retry, a queued fire to
   release, the schedule's due fires under the missed-fire and overlap policies) and claimed
   by compare-and-set on next_run_at, so each fire happens once even with several daemons;
3. prune fire history older than the retention period, once an hour.

Every fire is recorded, including the ones that make no task (skipped: overlap, missed times,
backoff, an open duplicate), so a job never misses a time without saying so.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from taskherd.model import FireStatus, OverlapPolicy
from taskherd.model.jobs import FireClaim, Job, PlannedFire, wake_time
from taskherd.model.settings import Config, ConfigError
from taskherd.policy.jobs import JobSpec, parse_jobs, pick_variant, task_for_fire, trigger_of
from taskherd.policy.schedules import MissedFire, ScheduleError, Trigger, due_fires
from taskherd.policy.taskspec import TaskSpecError
from taskherd.store import Store
from taskherd.store.jobs import JobNotFound, JobRefused

log = logging.getLogger("taskherd.scheduler")

@dataclass(frozen=True)
class SchedulerSettings:
    batch: int = 1000  # due jobs planned and claimed per transaction
    catch_up_limit: int = 10  # missed_fire = all fires at most this many per catch-up
    max_queued: int = 10  # overlap = queue holds at most this many fires per job
    grace: float = 60.0  # a fire this late is still on time (missed_fire = skip keeps it)
    retention: float = 30 * 86400.0  # fire records kept this long after they finish
    prune_every: float = 3600.0
    count_cap: int = 10_000  # missed fires counted up to this many for the record
    max_sleep: float = 60.0  # the loop looks at least this often (other nodes' changes)


@dataclass
class _Plan:
    """The fires of one due job, built step by step, and the job's new state."""

    job: Job
    config: Config
    settings: SchedulerSettings
    open: int = 0
    queued: int = 0
    cursor: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    fires: list[PlannedFire] = field(default_factory=list)

    def task(self, scheduled_for: float, kind: str, *, variant: int | None = None,
             rotate: bool = True, release: bool = False, retry_of: int | None = None,
             retry_count: int = 0) -> None:
        if rotate:
            variant = pick_variant(self.job, scheduled_for, self.cursor)
            if variant is not None:
                self.cursor += 1
        lineage: dict[str, Any] = {"retry_of": retry_of, "retry_count": retry_count,
                                   "variant": variant}
        try:
            new = task_for_fire(self.job, self.config, variant=variant,
                                scheduled_for=scheduled_for, kind=kind, retry_count=retry_count)
        except (TaskSpecError, ConfigError) as error:
            # The config changed under the job (its role or pool is gone): say so in the record.
            self.fires.append(PlannedFire(scheduled_for, kind, status=FireStatus.ERROR,
                                          release=release,
                                          error=f"cannot make its task: {error}", **lineage))
            return
        self.fires.append(PlannedFire(scheduled_for, kind, task=new, release=release, **lineage))
        self.open += 1

    def skip(self, scheduled_for: float, kind: str, why: str) -> None:
        self.fires.append(PlannedFire(scheduled_for, kind, status=FireStatus.SKIPPED, error=why))

    def overlapping(self, scheduled_for: float, kind: str) -> None:
        """A scheduled fire under the job's overlap policy."""
        overlap = self.job.overlap
        if not self.open or overlap == OverlapPolicy.ALLOW:
            self.task(scheduled_for, kind)
        elif overlap == OverlapPolicy.SKIP:
            held = f"task {self.job.open_task_id}" if self.job.open_task_id else "a task"
            self.skip(scheduled_for, kind,
                      f"{held} of an earlier fire is still open (overlap = skip)")
        elif self.queued >= self.settings.max_queued:
            self.skip(scheduled_for, kind, f"{self.queued} fires already queued (overlap = queue)")
        else:
            self.fires.append(PlannedFire(scheduled_for, kind, status=FireStatus.QUEUED))
            self.queued += 1

    def claim(self, now: float) -> FireClaim:
        self.state["variant_cursor"] = self.cursor
        self.state["queued"] = self.queued
        after = replace(self.job, **self.state, open_fires=self.open)
        self.state["next_run_at"] = wake_time(after, now)
        return FireClaim(self.job, dict(self.state), tuple(self.fires))


class Scheduler:
    def __init__(self, config: Config, store: Store, clock: Callable[[], float] = time.time,
                 settings: SchedulerSettings | None = None):
        self.config = config
        self.store = store
        self.clock = clock
        self.settings = settings or SchedulerSettings(retention=config.daemon.retention)
        self._pruned_at: float | None = None

    # -- the pass --------------------------------------------------------------------------

    def run_once(self, now: float) -> Counter[str]:
        counts: Counter[str] = Counter()
        counts["settled"] = len(self.store.settle_fires(now))
        for _ in range(100):  # bounded: a job that stays due after its claim cannot spin here
            due = self.store.due_jobs(now, self.settings.batch)
            if not due:
                break
            claims = [self._plan(job, now) for job in due]
            won = 0
            for _claim, fires in zip(claims, self.store.claim_fires(claims, now), strict=True):
                if fires is None:
                    counts["lost"] += 1
                    continue
                won += 1
                for fire in fires:
                    counts["fired" if fire.task_id is not None else fire.status] += 1
            if not won or len(due) < self.settings.batch:
                break
        if self._pruned_at is None or now - self._pruned_at >= self.settings.prune_every:
            counts["pruned"] = self.store.prune_fires(now - self.settings.retention)
            self._pruned_at = now
        return +counts

    def next_wake(self, now: float) -> float | None:
        """The earliest next_run_at of an enabled job (a retry, backoff end or run-now
        included), or None when no job will ever fire by itself."""
        return self.store.earliest_next_run()

    # -- planning one due job --------------------------------------------------------------

    def _plan(self, job: Job, now: float) -> FireClaim:
        plan = _Plan(job, self.config, self.settings, open=job.open_fires, queued=job.queued,
                     cursor=job.variant_cursor)
        if job.run_now_at is not None and job.run_now_at <= now:
            # A person asked for it: no overlap check, and the schedule does not move.
            plan.task(job.run_now_at, "run_now")
            plan.state["run_now_at"] = None
        if job.retry_at is not None and job.retry_at <= now:
            plan.task(job.retry_at, "retry", variant=job.retry_variant, rotate=False,
                      retry_of=job.retry_of, retry_count=job.retry_count)
            plan.state.update(retry_at=None, retry_of=None, retry_count=0)
        if job.queued and not plan.open:  # nor a run-now or retry task just made above
            plan.queued -= 1
            # The held fire's own time, not now: its task said it was scheduled for its release
            # and took the time-of-day variant of the release. now stays its fired_at.
            planned = job.release_for if job.release_for is not None else now
            plan.task(planned, "schedule", release=True)
        try:
            self._plan_schedule(job, plan, now)
        except (ScheduleError, ValueError) as error:
            # A stored trigger that no longer builds (a zone removed from tzdata): stop it
            # loudly rather than firing at a wrong time or retrying every pass.
            plan.skip(job.schedule_at or now, "schedule", f"trigger unusable, job stopped: {error}")
            plan.state["schedule_at"] = None
        return plan.claim(now)

    def _plan_schedule(self, job: Job, plan: _Plan, now: float) -> None:
        if job.schedule_at is None or job.schedule_at > now:
            return
        if job.backoff_until is not None and job.backoff_until > now:
            return
        trigger = trigger_of(job)
        first, moment = _utc(job.schedule_at), _utc(now)
        delayed = job.backoff_until is not None and job.backoff_until > job.schedule_at
        # Fires held back by failure backoff become one delayed fire, whatever missed_fire says.
        policy = MissedFire.ONCE if delayed else MissedFire(job.missed_fire)
        due = due_fires(trigger, first, moment, policy, self.settings.catch_up_limit,
                        grace=timedelta(seconds=self.settings.grace))
        following = trigger.next_after(moment)
        plan.state["schedule_at"] = following.timestamp() if following else None
        missed = self._count_due(trigger, first, moment) - len(due)
        if missed > 0:
            why = (f"held back by failure backoff after {job.failures} consecutive failure(s)"
                   if delayed else
                   f"missed while no scheduler ran (missed_fire = {job.missed_fire})")
            count = f"{missed}+" if missed >= self.settings.count_cap else str(missed)
            plan.skip(job.schedule_at, "catch_up",
                      f"{count} fire(s) from {first:%Y-%m-%d %H:%M:%S} UTC {why}")
        for fire in due:
            at = fire.timestamp()
            plan.overlapping(at, "schedule" if now - at <= self.settings.grace else "catch_up")

    def _count_due(self, trigger: Trigger, first: datetime, now: datetime) -> int:
        count, moment = 1, trigger.next_after(first)
        while moment is not None and moment <= now and count < self.settings.count_cap:
            count += 1
            moment = trigger.next_after(moment)
        return count

    # -- config sync -----------------------------------------------------------------------

    def sync_config(self, jobs: Sequence[JobSpec] | None = None,
                    now: float | None = None) -> dict[str, list[str]]:
        """Make the store's config jobs match `jobs` (default: the config's [[jobs]]):
        created, updated, disabled when removed. Jobs made with the CLI are left alone."""
        specs = parse_jobs(self.config) if jobs is None else jobs
        now = self.clock() if now is None else now
        result: dict[str, list[str]] = {
            "created": [], "updated": [], "unchanged": [], "disabled": [], "conflicts": [],
            "spent": []}
        for spec in specs:
            following = spec.trigger.next_after(_utc(now))
            schedule_at = following.timestamp() if following else None
            if schedule_at is None and spec.delete_after_run and self._gone(spec.name):
                # A one-shot deleted after its run, still in the file: every start and reload
                # brought it back as a job that would never fire.
                result["spent"].append(spec.name)
                continue
            try:
                upserted = self.store.upsert_job(spec.definition(), source="config", now=now,
                                                 schedule_at=schedule_at)
            except JobRefused as error:
                log.warning("config job %r not synced: %s", spec.name, error)
                result["conflicts"].append(spec.name)
                continue
            result[upserted.change].append(spec.name)
        names = {spec.name for spec in specs}
        for job in self.store.list_jobs(source="config", enabled=True):
            if job.name not in names:
                self.store.set_job_enabled(job.name, False, now)
                result["disabled"].append(job.name)
        return result

    def _gone(self, name: str) -> bool:
        try:
            self.store.get_job(name)
        except JobNotFound:
            return True
        return False

    def reload(self, config: Config, now: float | None = None) -> dict[str, list[str]]:
        """A new config (SIGHUP, `taskherd reload`): its jobs are synced; roles and pools
        apply to the tasks of later fires."""
        specs = parse_jobs(config)
        self.config = config
        return self.sync_config(specs, now)


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)
