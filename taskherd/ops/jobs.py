"""Jobs: add, change (a partial update), enable, disable, delete and fire now.

A job is given as the table a `[[jobs]]` entry of taskherd.toml holds (name, trigger keys,
the task template). Jobs made here are stored with source 'cli'; jobs from the config file are
changed in the file, and refused here, so a sync never undoes a person's edit unseen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from taskherd.model.jobs import Job, JobDefinition
from taskherd.ops import BadInput, Queue
from taskherd.policy.job_chains import AFTER, JobChainError, check_links, link_table, parent_of
from taskherd.policy.jobs import JobError, parse_job, parse_jobs, trigger_of
from taskherd.policy.schedules import schedule_start
from taskherd.store.jobs import JobNotFound, JobRefused

TRIGGER_KEYS = ("cron", "calendar", "every", "window", "at", "manual")
# Fields an update can remove. Fields not given keep their value, so without a way to clear
# them a pool, dedup key or variants, once set, could only be replaced, never dropped.
CLEARABLE = ("pool", "dedup_key", "variants")


def add_job(queue: Queue, table: Mapping[str, Any], now: float) -> Job:
    """Add a job; a job of the same name is refused (change it with update_job)."""
    definition, schedule_at = new_job(queue, table, now)
    return queue.store.upsert_job(definition, source="cli", now=now,
                                  schedule_at=schedule_at).job


def new_job(queue: Queue, table: Mapping[str, Any], now: float) -> tuple[JobDefinition,
                                                                          float | None]:
    """`table` checked as a new job (as `[[jobs]]` and `taskherd jobs add` check it: fields,
    trigger, template, links; its name not in use): its definition and first fire. The one
    check for every way a job is added (`jobs add`, a spawn message)."""
    spec = _parsed(queue, dict(table), now)
    name = spec.definition().name
    _check_links(queue, name, parent_of(spec.template))
    try:
        existing = queue.store.get_job(name)
    except JobNotFound:
        existing = None
    if existing is not None:
        raise JobRefused(f"a job named {name!r} already exists (source {existing.source}); "
                         "use `taskherd jobs update`")
    return spec.definition(), schedule_start(spec.trigger, now)


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
    # dst_gap alone keeps the trigger; a new trigger replaces the old one whole, its policy too.
    retrigger = any(key in changes for key in (*TRIGGER_KEYS, "dst_gap"))
    if any(key in changes for key in TRIGGER_KEYS):
        kept = _interval_kept(job, changes)
        for key in (*TRIGGER_KEYS, "timezone", "dst_gap"):
            table.pop(key, None)
        table.setdefault("timezone", job.timezone)
        table.update(kept)
    for key in cleared:
        table.pop(key, None)
    table.update(changes)
    spec = _parsed(queue, table, now, check_past=retrigger)
    _check_links(queue, name, parent_of(spec.template))
    return queue.store.upsert_job(spec.definition(), source="cli", now=now,
                                  schedule_at=schedule_start(spec.trigger, now)).job


def enable_job(queue: Queue, name: str, now: float) -> Job:
    """Enable a job; its schedule restarts from now (missed fires are not caught up)."""
    job = queue.store.get_job(name)
    return queue.store.set_job_enabled(name, True, now, schedule_start(trigger_of(job), now))


def disable_job(queue: Queue, name: str, now: float) -> Job:
    return queue.store.set_job_enabled(name, False, now)


def delete_job(queue: Queue, name: str, now: float) -> list[str]:
    """Delete a CLI-made job; its fire history is kept. Jobs that followed it are disabled
    (their parent is gone: they would never fire); their names are returned."""
    job = queue.store.get_job(name)
    if job.source != "cli":
        raise JobRefused(f"job {name!r} comes from the config file: remove it there, "
                         "then `taskherd reload` (it is disabled, its history kept)")
    orphans = [child.name for child in queue.store.list_jobs()
               if parent_of(child.template) == name]
    queue.store.delete_job(name, now)
    for orphan in orphans:
        queue.store.set_job_enabled(orphan, False, now)
    return orphans


def job_tree(queue: Queue) -> list[dict[str, Any]]:
    """Every job as a forest by parent: each {name, enabled, on, when, delay, open_task_id,
    children}; a job whose parent is gone is a root marked `orphan`."""
    jobs = queue.store.list_jobs()
    names = {job.name for job in jobs}
    nodes = {job.name: {"name": job.name, "enabled": job.enabled,
                        "open_task_id": job.open_task_id, **link_table(job.template.get(AFTER)),
                        "children": []} for job in jobs}
    roots = []
    for job in jobs:
        parent = parent_of(job.template)
        if parent in names:
            nodes[parent]["children"].append(nodes[job.name])
        else:
            nodes[job.name]["orphan"] = parent is not None
            roots.append(nodes[job.name])
    return roots


def cancel_job(queue: Queue, name: str, now: float) -> list[Any]:
    """Cancel the job's open task (and what its chain created), then the same for every job
    below it; a pending chained fire of those jobs is dropped. The cancelled tasks."""
    from taskherd.store import TransitionRefused

    below = {name}
    jobs = queue.store.list_jobs()
    grew = True
    while grew:
        grew = False
        for job in jobs:
            if job.name not in below and parent_of(job.template) in below:
                below.add(job.name)
                grew = True
    cancelled: list[Any] = []
    for job in jobs:
        if job.name not in below:
            continue
        if job.name != name and job.run_now_at is not None:
            queue.store.clear_run_now(job.name, now)
        for task in queue.store.open_tasks_of_job(job.name):
            try:
                cancelled += queue.store.cancel_tree(task.id, now, f"job {name!r} was cancelled")
            except TransitionRefused:
                continue  # finished meanwhile
    if name not in {job.name for job in jobs}:
        queue.store.get_job(name)  # raises JobNotFound
    return cancelled


def _check_links(queue: Queue, name: str, parent: str | None) -> None:
    """The stored jobs with this one added or changed: parents exist, no loop."""
    parents = {job.name: parent_of(job.template) for job in queue.store.list_jobs()}
    parents[name] = parent
    try:
        check_links(parents, set(parents))
    except JobChainError as error:
        raise BadInput(str(error)) from None


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
    template = {key: value for key, value in job.template.items() if key != AFTER}
    table = {"name": job.name, **template, **job.trigger,
             **link_table(job.template.get(AFTER))}
    table.update(overlap=job.overlap, missed_fire=job.missed_fire, max_retries=job.max_retries,
                 delete_after_run=job.delete_after_run, enabled=job.enabled)
    return table


def _interval_kept(job: Job, changes: dict[str, Any]) -> dict[str, Any]:
    other_trigger = any(k in changes for k in ("cron", "calendar", "at", "manual"))
    if "every" not in job.trigger or other_trigger:
        return {}
    kept: dict[str, Any] = {key: job.trigger[key] for key in ("every", "window")
                            if key in job.trigger}
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

    from taskherd.policy.schedules import next_fires

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
