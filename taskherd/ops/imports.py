"""`taskherd import` and `taskherd export`: a fleet's schedules in, and out.

Import reads the source files (parsed by taskherd/importers, never run), checks every job as
`[[jobs]]` and `jobs add` check them, and either shows the plan (the dry run) or adds the jobs
as CLI jobs. Each job is named after its source id, so importing a file twice changes
nothing. All of it is checked before anything is written.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from taskherd.importers import (
    SOURCES,
    Dropped,
    ImportedJob,
    ImportError_,
    crontab,
    launchd,
    openclaw,
    systemd,
)
from taskherd.importers.fires import compare
from taskherd.importers.model import Imported
from taskherd.ops import BadInput, Queue
from taskherd.ops.jobs import stored_table
from taskherd.policy.jobs import JobError, parse_job
from taskherd.policy.schedules import (
    CalendarTrigger,
    CronTrigger,
    EveryTrigger,
    next_fires,
    schedule_start,
)
from taskherd.store.jobs import JobNotFound

PREVIEW_FIRES = 3


@dataclass
class Plan:
    source: str
    jobs: list[ImportedJob] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)  # command roles to add
    missing_roles: list[str] = field(default_factory=list)  # named roles not in the config

    def to_dict(self, now: float) -> dict[str, Any]:
        return {"source": self.source, "roles": self.roles, "missing_roles": self.missing_roles,
                "jobs": [job_view(job, now) for job in self.jobs],
                "dropped": [d.__dict__ for d in self.dropped]}


def job_view(job: ImportedJob, now: float) -> dict[str, Any]:
    """A job of the plan with its next fires in its zone, by the scheduler's own trigger,
    beside the source's own (by the source's rules), and where the two differ: in the next
    fires or around a DST change of the coming year. A difference is said, never refused."""
    start = datetime.fromtimestamp(now, UTC)
    zone = job.trigger.tz
    fires = [f.astimezone(zone).isoformat() for f in next_fires(job.trigger, start, PREVIEW_FIRES)]
    view: dict[str, Any] = {"source_id": job.source_id, "table": job.table, "source_rule": job.rule,
            "next_fires": fires, "notes": list(job.notes)}
    if isinstance(job.trigger, CronTrigger | CalendarTrigger | EveryTrigger):
        view["dst_gap"] = job.trigger.dst_gap.value
    if job.source_rule is not None:
        compared = compare(job.trigger, job.source_rule, start, PREVIEW_FIRES)
        view["source_fires"] = (None if compared.fires is None
                                else [f.astimezone(zone).isoformat() for f in compared.fires])
        view["source_fires_by"] = compared.how
        view["fires_match"] = compared.verdict
        view["differences"] = list(compared.differences)
        if compared.why_unknown:
            view["source_fires_unknown"] = compared.why_unknown
    if job.start_at is not None:
        view["source_next_fire"] = datetime.fromtimestamp(job.start_at, UTC).astimezone(
            job.trigger.tz).isoformat()
    return view


def plan_import(config: Any, source: str, files: list[tuple[str, bytes]],
                role_map: dict[str, str], now: float) -> Plan:
    """What importing `files` would create; bad input raises BadInput naming file, job, field."""
    if source not in SOURCES:
        raise BadInput(f"source {source!r}: expected one of {', '.join(SOURCES)}")
    zone = config.daemon.timezone
    try:
        imported = _parse(source, files, zone, role_map)
    except ImportError_ as error:
        raise BadInput(str(error)) from None
    plan = Plan(source, dropped=imported.dropped)
    for job in imported.jobs:
        if job.trigger.kind == "at" and job.trigger.next_after(datetime.fromtimestamp(now, UTC)) \
                is None:
            plan.dropped.append(Dropped(job.table["name"], job.source_id, "at",
                                        "already past: this one-shot has fired"))
            continue
        if job.table["name"] in {j.table["name"] for j in plan.jobs}:
            plan.dropped.append(Dropped(job.table["name"], job.source_id, "duplicate",
                                        "the same schedule and command again: one job (cron "
                                        "ran it twice)"))
            continue
        plan.jobs.append(job)
        role = job.role
        if role is not None:
            plan.roles.setdefault(role.name, role.table)
        elif job.table["role"] not in config.roles and job.table["role"] not in plan.missing_roles:
            plan.missing_roles.append(job.table["role"])
    return plan


def _parse(source: str, files: list[tuple[str, bytes]], zone: str | None,
           role_map: dict[str, str]) -> Imported:
    if source == "systemd":
        return systemd.parse(dict(files), zone)
    result = Imported()
    for name, data in files:
        if source == "openclaw":
            result.extend(openclaw.parse(name, data, zone, role_map))
        else:
            result.extend({"launchd": launchd.parse, "crontab": crontab.parse}[source](
                name, data, zone))
    return result


def apply_import(queue: Queue, plan: Plan, now: float) -> list[tuple[str, str]]:
    """Add the plan's jobs as CLI jobs: (name, created | updated | unchanged) each. Every job is
    checked first (its role must be in the config), so bad input writes nothing."""
    needed = sorted({job.table["role"] for job in plan.jobs} - set(queue.config.roles))
    if needed:
        raise BadInput(f"roles {', '.join(needed)} are not in {queue.config.source or 'the config'}"
                       ": add the [roles.…] tables the dry run prints (or map agents to your "
                       "roles with --role-map AGENT=ROLE), then run again")
    checked = []
    for job in plan.jobs:
        try:
            spec = parse_job(job.table, queue.config)
        except JobError as error:
            raise BadInput(f"job {job.table['name']!r} ({job.source_id}): {error}") from None
        try:
            existing = queue.store.get_job(spec.name)
        except JobNotFound:
            existing = None
        if existing is not None and existing.source != "cli":
            raise BadInput(f"job {spec.name!r} already comes from the config file; remove it "
                           "there or leave it out of the import")
        start = job.start_at if job.start_at is not None else schedule_start(spec.trigger, now)
        checked.append((spec.definition(), start))
    return [(definition.name, queue.store.upsert_job(definition, source="cli", now=now,
                                                     schedule_at=start).change)
            for definition, start in checked]


def export(queue: Queue) -> dict[str, Any]:
    """Every stored job as the table that defines it, and the config's tables of the roles they
    use, as the config file writes them."""
    jobs = [stored_table(job) for job in queue.store.list_jobs()]
    used = sorted({str(job.get("role")) for job in jobs})
    raw: dict[str, Any] = {}
    if queue.config.source is not None:
        with open(queue.config.source, "rb") as handle:
            raw = tomllib.load(handle).get("roles", {})
    return {"roles": {name: raw[name] for name in used if name in raw}, "jobs": jobs}
