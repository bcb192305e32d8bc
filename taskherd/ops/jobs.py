"""Jobs: add, change (a partial update), enable, disable, delete and fire now.

A job is given as the table a `[[jobs]]` entry of taskherd.toml holds (name, trigger keys,
the task template). Jobs made here are stored with source 'cli'; jobs from the config file are
changed in the file, and refused here, so a sync never undoes a person's edit unseen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from taskherd.jobs import JobError, parse_job, parse_jobs, trigger_of
from taskherd.ops import BadInput, Queue
from taskherd.services.scheduler import schedule_start
from taskherd.store.jobs import Job, JobNotFound, JobRefused

TRIGGER_KEYS = ("cron", "calendar", "every", "window", "at", "manual")
# Fields an update can remove. Fields not given keep their value, so without a way to clear
# them a pool, dedup key or variants, once set, could only be replaced, never dropped.
CLEARABLE = ("pool", "dedup_key", "variants")


def add_job(queue: Queue, table: Mapping[str, Any], now: float) -> Job:
    """Add a job; a job of the same name is refused (change it with update_job)."""
    spec = _parsed(queue, dict(table), now)
    name = spec.definition().name
    try:
        existing = queue.store.get_job(name)
    except JobNotFound:
        existing = None
    if existing is not None:
        raise JobRefused(f"a job named {name!r} already exists (source {existing.source}); "
                         "use `taskherd jobs update`")
    return queue.store.upsert_job(spec.definition(), source="cli", now=now,
                                  schedule_at=schedule_start(spec.trigger, now)).job


def update_job(queue: Queue, name: str, changes: Mapping[str, Any], now: float,
               clear: Iterable[str] = ()) -> Job:
    """Change a CLI-made job: keys in `changes` replace theirs, the rest keep their value;
    `clear` names fields to remove (pool, dedup_key, variants). A new trigger replaces the
    old one whole, except that `every` and `window` are one trigger: a new `every` keeps the
    window and a new `window` the interval (`window = ""` drops it)."""
    changes = dict(changes)
    cleared = list(clear)
    for key in cleared:
        if key not in CLEARABLE:
            raise BadInput(f"clear {key!r}: expected one of {', '.join(CLEARABLE)}")
        if changes.get(key) not in (None, (), []):
            raise BadInput(f"{key}: the update both sets it and removes it; give one, not both")
    job = queue.store.get_job(name)
    if job.source != "cli":
        raise JobRefused(f"job {name!r} comes from the config file: change it there, "
                         "then `taskherd reload`")
    table = stored_table(job)
    retrigger = any(key in changes for key in TRIGGER_KEYS)
    if retrigger:
        kept = _interval_kept(job, changes)
        for key in (*TRIGGER_KEYS, "timezone"):
            table.pop(key, None)
        table.setdefault("timezone", job.timezone)
        table.update(kept)
    for key in cleared:
        table.pop(key, None)
    table.update(changes)
    spec = _parsed(queue, table, now, check_past=retrigger)
    return queue.store.upsert_job(spec.definition(), source="cli", now=now,
                                  schedule_at=schedule_start(spec.trigger, now)).job


def enable_job(queue: Queue, name: str, now: float) -> Job:
    """Enable a job; its schedule restarts from now (missed fires are not caught up)."""
    job = queue.store.get_job(name)
    return queue.store.set_job_enabled(name, True, now, schedule_start(trigger_of(job), now))


def disable_job(queue: Queue, name: str, now: float) -> Job:
    return queue.store.set_job_enabled(name, False, now)


def delete_job(queue: Queue, name: str, now: float) -> None:
    """Delete a CLI-made job; its fire history is kept."""
    job = queue.store.get_job(name)
    if job.source != "cli":
        raise JobRefused(f"job {name!r} comes from the config file: remove it there, "
                         "then `taskherd reload` (it is disabled, its history kept)")
    queue.store.delete_job(name, now)


def run_job_now(queue: Queue, name: str, now: float) -> None:
    """Fire the job at the scheduler's next tick, without moving its schedule."""
    queue.store.request_run_now(name, now)


def list_jobs(queue: Queue, now: float) -> list[dict[str, Any]]:
    """Every job with its last fire, by name: the stored ones, and the config's jobs that no
    daemon has synced yet (before the first `taskherd up`, or since the file changed), shown
    with `synced: false` and the next fire they would have."""
    store = queue.store
    stored = {job.name: job for job in store.list_jobs()}
    rows = {name: job.to_dict() | {"synced": True, "last_fire": _last_fire(queue, name)}
            for name, job in stored.items()}
    for spec in parse_jobs(queue.config):
        if spec.name in stored:
            continue
        definition = spec.definition()
        rows[spec.name] = {
            "name": spec.name, "enabled": definition.enabled, "source": "config",
            "trigger": definition.trigger, "timezone": definition.timezone,
            "next_run_at": schedule_start(spec.trigger, now) if definition.enabled else None,
            "failures": 0, "synced": False, "last_fire": None,
        }
    return [rows[name] for name in sorted(rows)]


def _last_fire(queue: Queue, name: str) -> dict[str, Any] | None:
    fire = next(iter(queue.store.list_fires(job=name, limit=1)), None)
    return fire.to_dict() if fire else None


def stored_table(job: Job) -> dict[str, Any]:
    """A stored job as the table that would define it."""
    table = {"name": job.name, **job.template, **job.trigger}
    table.update(overlap=job.overlap, missed_fire=job.missed_fire, max_retries=job.max_retries,
                 delete_after_run=job.delete_after_run, enabled=job.enabled)
    return table


def _interval_kept(job: Job, changes: dict[str, Any]) -> dict[str, Any]:
    if "every" not in job.trigger or any(k in changes for k in ("cron", "calendar", "at", "manual")):
        return {}
    kept = {key: job.trigger[key] for key in ("every", "window") if key in job.trigger}
    if changes.get("window") == "":
        del changes["window"]
        kept.pop("window", None)
    return kept


def _parsed(queue: Queue, table: dict[str, Any], now: float, check_past: bool = True) -> Any:
    try:
        spec = parse_job(table, queue.config)
    except JobError as error:
        raise BadInput(str(error)) from error
    # Only a new `at` must be ahead: a one-shot that already fired still takes a new prompt.
    if check_past and spec.trigger.kind == "at" and schedule_start(spec.trigger, now) is None:
        raise BadInput(f"at: {table.get('at')!r} is in the past; accepted: a future date-time")
    return spec


def get_job(queue: Queue, name: str, fires: int = 10) -> dict[str, Any]:
    """One job with its last `fires` fires, newest first."""
    job = queue.store.get_job(name)
    recent = queue.store.list_fires(job=name, limit=fires) if fires else []
    return job.to_dict() | {"fires": [fire.to_dict() for fire in recent]}


def next_fire_times(queue: Queue, name: str, now: float, count: int = 5) -> list[float]:
    """When the job would fire next (unix seconds), `count` times at most."""
    from datetime import UTC, datetime

    from taskherd.schedules import next_fires

    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
        raise BadInput(f"count = {count!r}: expected a whole number from 1 to 1000")
    try:
        trigger = trigger_of(queue.store.get_job(name))
    except JobNotFound:  # a job of the config no daemon has synced yet
        spec = next((spec for spec in parse_jobs(queue.config) if spec.name == name), None)
        if spec is None:
            raise
        trigger = spec.trigger
    return [fire.timestamp()
            for fire in next_fires(trigger, datetime.fromtimestamp(now, UTC), count)]
