"""Jobs as people write them: a [[jobs]] table of taskherd.toml or `taskherd jobs add` options
→ a validated `JobSpec`, and a stored job → the task one of its fires makes.

A job is a task template plus one trigger (schedules.parse_trigger). The template is checked
with the same validator as every other way a task enters the queue (taskspec.new_task_from),
so a job cannot hold a task the queue would refuse. Errors name `jobs[N].key` and the value.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, time
from enum import StrEnum
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from taskherd.model import NewTask, OverlapPolicy
from taskherd.model.jobs import Job, JobDefinition
from taskherd.model.record import Record
from taskherd.policy.job_chains import (
    AFTER,
    LINK_KEYS,
    JobChainError,
    check_links,
    parent_of,
    parse_link,
)
from taskherd.policy.schedules import (
    MissedFire,
    ScheduleError,
    Trigger,
    parse_trigger,
)
from taskherd.policy.taskspec import TaskSpecError, new_task_from

if TYPE_CHECKING:  # the config imports this module (to check [[jobs]]) at load, not the reverse
    from taskherd.model.settings import Config

TRIGGER_KEYS = ("cron", "calendar", "every", "window", "at", "manual", "timezone", "dst_gap")
TEMPLATE_KEYS = ("role", "title", "prompt", "priority", "pool", "dedup_key", "max_attempts",
                 "review", "pending", "meta", "deliver_to", "on")
POLICY_KEYS = ("overlap", "missed_fire", "max_retries", "delete_after_run", "enabled")
JOB_KEYS = ("name", *TEMPLATE_KEYS, "variants", *TRIGGER_KEYS, *POLICY_KEYS, *LINK_KEYS)
# What a variant may change: the work, not the job's identity or limits.
VARIANT_KEYS = ("title", "prompt", "role", "priority", "pool", "dedup_key", "from")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
MAX_RETRIES_LIMIT = 10


class JobError(ValueError):
    """A job that cannot be built; the message names the key, the value and what is accepted."""


class JobSpec(Record):
    name: str
    template: Mapping[str, Any]  # task fields, validated
    trigger: Trigger
    variants: tuple[Mapping[str, Any], ...] = ()
    overlap: OverlapPolicy = OverlapPolicy.SKIP
    missed_fire: MissedFire = MissedFire.ONCE
    max_retries: int = 0
    delete_after_run: bool = False
    enabled: bool = True

    def definition(self) -> JobDefinition:
        template = dict(self.template)
        if self.variants:
            template["variants"] = [dict(v) for v in self.variants]
        return JobDefinition(
            name=self.name,
            template=template,
            trigger=self.trigger.to_spec(),
            timezone=self.trigger.tz.key,
            overlap=self.overlap.value,
            missed_fire=self.missed_fire.value,
            max_retries=self.max_retries,
            delete_after_run=self.delete_after_run,
            enabled=self.enabled,
        )


def parse_jobs(config: Config) -> tuple[JobSpec, ...]:
    """Every [[jobs]] table of the config; names must be unique."""
    specs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(config.jobs):
        where = f"jobs[{index}]."
        try:
            spec = parse_job(table, config, where=where)
        except JobError as error:
            named = table.get("name") if isinstance(table, Mapping) else None
            if not isinstance(named, str):
                raise
            raise JobError(f"{error} (job {named!r})") from error  # which one, by its name
        if spec.name in seen:
            raise JobError(f"{where}name = {spec.name!r}: already used by jobs[{seen[spec.name]}]")
        seen[spec.name] = index
        specs.append(spec)
    parents = {spec.name: parent_of(spec.template) for spec in specs}
    try:
        check_links(parents, set(parents))
    except JobChainError as error:
        raise JobError(f"jobs: {error}") from None
    return tuple(specs)


def parse_job(table: Mapping[str, Any], config: Config, *, where: str = "") -> JobSpec:
    """One job table (the CLI builds the same table from its options)."""
    if not isinstance(table, Mapping):
        raise JobError(f"{where.rstrip('.')}: a job must be a table")
    unknown = sorted(set(table) - set(JOB_KEYS))
    if unknown:
        raise JobError(f"{where}{unknown[0]}: unknown key (accepted: {', '.join(JOB_KEYS)})")
    name = _name(table.get("name"), where)
    try:
        trigger = parse_trigger({k: table[k] for k in TRIGGER_KEYS if k in table},
                                config.daemon.timezone)
    except ScheduleError as error:
        raise JobError(f"{where}{error}") from error
    template = _template(table, name, config, where)
    variants = _variants(table.get("variants"), template, config, where)
    try:
        link = parse_link(table, where)
    except JobChainError as error:
        raise JobError(str(error)) from None
    if link is not None:
        if link["job"] == name:
            raise JobError(f"{where}parent = {name!r}: a job cannot follow itself")
        template[AFTER] = link
    return JobSpec(
        name=name,
        template=template,
        trigger=trigger,
        variants=variants,
        overlap=_choice(table, "overlap", OverlapPolicy, OverlapPolicy.SKIP, where),
        missed_fire=_choice(table, "missed_fire", MissedFire, MissedFire.ONCE, where),
        max_retries=_retries(table.get("max_retries", 0), where),
        delete_after_run=_flag(table, "delete_after_run", False, where),
        enabled=_flag(table, "enabled", True, where),
    )


def _name(value: Any, where: str) -> str:
    if value is None:
        raise JobError(f"{where}name is required (a unique name such as 'daily-review')")
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise JobError(f"{where}name = {value!r}: expected letters, digits, '_', '.', ':' or '-' "
                       "(starting with a letter or digit, at most 100)")
    return value


def _template(table: Mapping[str, Any], name: str, config: Config, where: str) -> dict[str, Any]:
    # `on` says when a chained job fires after its `parent` (the link keeps it); only on a
    # job without a parent does it name the settles its delivery targets are told.
    chained = table.get("parent") is not None
    template = {key: table[key] for key in TEMPLATE_KEYS
                if key in table and not (chained and key == "on")}
    template.setdefault("title", name)
    try:
        new_task_from(template, config)
    except TaskSpecError as error:
        raise JobError(f"{where}{error}") from error
    return template


def _variants(value: Any, template: Mapping[str, Any], config: Config,
              where: str) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    accepted = ("a list of tables with any of " + ", ".join(VARIANT_KEYS)
                + ", e.g. variants = [{prompt = 'a'}, {prompt = 'b'}]")
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        raise JobError(f"{where}variants = {value!r}: expected {accepted}")
    timed = ["from" in v for v in value]
    if any(timed) and not all(timed):
        raise JobError(f"{where}variants: give every variant a 'from' time or none "
                       "(time-of-day variants) — some have one, some don't")
    variants, starts = [], set()
    for i, variant in enumerate(value):
        here = f"{where}variants[{i}]."
        unknown = sorted(set(variant) - set(VARIANT_KEYS))
        if unknown:
            raise JobError(f"{here}{unknown[0]}: unknown key (accepted: {', '.join(VARIANT_KEYS)})")
        variant = dict(variant)
        if "from" in variant:
            variant["from"] = _clock(variant["from"], f"{here}from")
            if variant["from"] in starts:
                raise JobError(f"{here}from = {variant['from']!r}: another variant starts then")
            starts.add(variant["from"])
        try:
            new_task_from(_overlay(template, variant), config)
        except TaskSpecError as error:
            raise JobError(f"{here}{error}") from error
        variants.append(variant)
    return tuple(variants)


def _clock(value: Any, where: str) -> str:
    try:
        if not isinstance(value, str):
            raise ValueError
        text = value.strip()
        return time.fromisoformat(("0" + text) if len(text.split(":")[0]) == 1 else text).strftime(
            "%H:%M")
    except ValueError:
        raise JobError(
            f"{where} = {value!r}: expected a time of day 'HH:MM', e.g. '06:00'") from None


def _choice(table: Mapping[str, Any], key: str, kind: type[StrEnum], default: Any,
            where: str) -> Any:
    value = table.get(key)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        options = ", ".join(member.value for member in kind)
        raise JobError(f"{where}{key} = {value!r}: expected one of {options}") from None


def _retries(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES_LIMIT:
        raise JobError(f"{where}max_retries = {value!r}: "
                       f"expected a whole number 0-{MAX_RETRIES_LIMIT}")
    return value


def _flag(table: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise JobError(f"{where}{key} = {value!r}: expected true or false")
    return value


# --- a stored job → its trigger and the task of one fire ------------------------------------


def trigger_of(job: Job) -> Trigger:
    return _trigger_from_spec(json.dumps(job.trigger, sort_keys=True))


@functools.lru_cache(maxsize=65536)
def _trigger_from_spec(spec: str) -> Trigger:
    # Stored specs carry their zone, so no default is needed; cached because the scheduler
    # rebuilds a job's trigger on every fire and 1,000 jobs may fall due in one second.
    return parse_trigger(json.loads(spec), None)


def pick_variant(job: Job, scheduled_for: float, cursor: int | None = None) -> int | None:
    """Which variant a fire uses: in turn (the job's cursor), or by the local time of day of
    the fire when the variants have `from` times (the latest start at or before it; before the
    first start, the last one, carried over from the evening before)."""
    variants = job.template.get("variants") or []
    if not variants:
        return None
    if "from" not in variants[0]:
        return (job.variant_cursor if cursor is None else cursor) % len(variants)
    local = datetime.fromtimestamp(scheduled_for, UTC).astimezone(ZoneInfo(job.timezone))
    clock = local.strftime("%H:%M")
    order = sorted(range(len(variants)), key=lambda i: variants[i]["from"])
    chosen = order[-1]
    for i in order:
        if variants[i]["from"] <= clock:
            chosen = i
    return chosen


def task_for_fire(job: Job, config: Config, *, variant: int | None, scheduled_for: float,
                  kind: str, retry_count: int = 0) -> NewTask:
    """The task of one fire: the template, the variant over it, and where it came from in
    `meta` (job, scheduled time, fire kind)."""
    template = {k: v for k, v in job.template.items() if k not in ("variants", AFTER)}
    variants = job.template.get("variants") or []
    if variant is not None and variant < len(variants):
        template = _overlay(template, variants[variant])
    template["title"] = fill_title(str(template.get("title") or job.name), job, scheduled_for,
                                   kind)
    meta = dict(template.get("meta") or {})
    meta.update({"job": job.name, "scheduled_for": scheduled_for, "fire": kind})
    if retry_count:
        meta["retry_count"] = retry_count
    template["meta"] = meta
    return new_task_from(template, config)


# What a job's title may name, filled in per fire: "{job} {date}" → "digest 2026-11-23".
# Other braces are left as written, so a title that holds them by chance still works.
_TITLE_PLACEHOLDER = re.compile(r"\{(job|date|time|fire)\}")


def fill_title(title: str, job: Job, scheduled_for: float, kind: str) -> str:
    """The title with {job}, {date} and {time} (the fire's, in the job's zone) and {fire}."""
    moment = datetime.fromtimestamp(scheduled_for, ZoneInfo(job.timezone))
    values = {"job": job.name, "date": moment.strftime("%Y-%m-%d"),
              "time": moment.strftime("%H:%M"), "fire": kind}
    return _TITLE_PLACEHOLDER.sub(lambda match: values[match.group(1)], title)


def _overlay(template: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
    return {**template, **{k: v for k, v in variant.items() if k != "from"}}


def describe_trigger(spec: Mapping[str, Any]) -> str:
    """A one-line trigger for tables: 'cron 30 2 * * *', 'every 30m 08:00-22:30'…"""
    if "cron" in spec:
        return f"cron {spec['cron']}"
    if "calendar" in spec:
        entries = spec["calendar"]
        parts = [",".join(f"{k}={v}" for k, v in e.items()) for e in entries[:2]]
        more = f" +{len(entries) - 2}" if len(entries) > 2 else ""
        return "calendar " + "; ".join(parts) + more
    if "every" in spec:
        window = f" {spec['window']}" if spec.get("window") else ""
        return f"every {_human(spec['every'])}{window}"
    if "at" in spec:
        return f"at {spec['at']}"
    return "manual"


def _human(every: str) -> str:
    seconds = int(float(str(every).rstrip("s")))
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
