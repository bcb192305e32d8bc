"""`taskherd jobs …` and `taskherd reload`: schedules that create tasks.

Jobs made here are stored with source 'cli' and never touched by a config sync; jobs from
taskherd.toml are changed in the file (then `taskherd reload`). `jobs next` shows when a job,
or an expression, would fire, so a schedule can be checked before it is trusted.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from taskherd.cli.common import (
    BadInput,
    Refused,
    format_time,
    get_config,
    json_option,
    now,
    print_json,
    print_table,
    store_for,
)
from taskherd.config import load_config
from taskherd.model.jobs import Job
from taskherd.model.settings import ConfigError
from taskherd.ops import jobs as job_ops
from taskherd.policy.jobs import (
    describe_trigger,
    trigger_of,
)
from taskherd.policy.schedules import ScheduleError, next_fires, parse_trigger
from taskherd.store import Store
from taskherd.store.jobs import JobNotFound, JobRefused

TRIGGER_OPTIONS = job_ops.TRIGGER_KEYS
# Fields `jobs update` can remove: (table key, the option that sets it, the flag that clears it).
# Options not given keep their value, so without these a pool, dedup key or variants, once set,
# could only be replaced, never dropped.
CLEARABLE = (("pool", "--pool", "--no-pool"), ("dedup_key", "--dedup-key", "--no-dedup-key"),
             ("variants", "--variant", "--no-variants"))


@click.group("jobs")
def jobs_group() -> None:
    """Schedules that create tasks: list, inspect, add, change, run now, preview."""


@contextmanager
def job_store(ctx: click.Context, writes: bool = True) -> Iterator[Store]:
    with store_for(ctx, writes=writes) as store:
        try:
            yield store
        except JobNotFound as error:
            raise BadInput(str(error)) from error
        except JobRefused as error:
            raise Refused(str(error)) from error


@contextmanager
def job_queue(ctx: click.Context, writes: bool = True) -> Iterator[Any]:
    """The queue for a job operation: an unknown job is bad input, a refused change exit 1."""
    from taskherd.ops import Queue

    with job_store(ctx, writes=writes) as store:
        yield Queue(get_config(ctx), store)


def trigger_options(command: Any) -> Any:
    options = [
        click.option("--cron", help="5-field cron expression or @hourly/@daily/…"),
        click.option("--calendar", multiple=True,
                     help="launchd-style entry 'hour=9,minute=0[,weekday=1,day=,month=]' "
                          "(repeat for several) or a JSON list."),
        click.option("--every", help="An interval such as '30m' (1s to 1d)."),
        click.option("--window", help="Daily window for --every, e.g. '08:00-22:30' "
                     "('' removes it on update)."),
        click.option("--at", help="One-shot ISO date-time, read in the job's zone."),
        click.option("--manual", is_flag=True, default=None, help="No trigger: run by hand only."),
        click.option("--tz", "timezone", help="IANA zone (default: [daemon] timezone)."),
        click.option("--dst-gap", "dst_gap", type=click.Choice(["shift", "skip", "next_valid"]),
                     help="A time the day does not have (clocks jump forward): later by the "
                          "gap (shift, default), not that day (skip), or right after the jump "
                          "(next_valid)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def job_options(command: Any) -> Any:
    options = [
        click.option("--role", "-r", help="Role that runs its tasks."),
        click.option("--title", help="Task title (default: the job's name)."),
        click.option("--prompt", "-p", help="The agent's instructions."),
        click.option("--priority", "-P", help="P0 (first) … P3."),
        click.option("--pool", help="A pool from [pools]."),
        click.option("--dedup-key", help="Skip a fire while a task with this key is open."),
        click.option("--max-attempts", type=int, help="Strikes before a task goes to dead."),
        click.option("--overlap", type=click.Choice(["skip", "allow", "queue"]),
                     help="When the previous task is still open (default skip)."),
        click.option("--missed-fire", type=click.Choice(["skip", "once", "all"]),
                     help="Fires missed while down (default once)."),
        click.option("--max-retries", type=int, help="Retries of a failed fire (30s × 2^(n−1))."),
        click.option("--variant", "variants", multiple=True,
                     help="A prompt to rotate through, in order (repeat for each)."),
        click.option("--delete-after-run/--keep-after-run", default=None,
                     help="Delete the job once its fire has run (for --at)."),
        click.option("--enabled/--disabled", default=None, help="Start enabled (default)."),
        click.option("--parent", help="Fire when this job's task settles (a job chain)."),
        click.option("--on", "on", type=click.Choice(["success", "failure", "complete"]),
                     help="With --parent: after its success (default), its failure once "
                          "its retries are spent, or either."),
        click.option("--when", help="With --parent: only if its summary or error matches "
                                    "'contains:TEXT' or 'regex:PATTERN'."),
        click.option("--delay", help="With --parent: wait this long after it, e.g. '10m'."),
    ]
    for option in reversed(options):
        command = option(command)
    return trigger_options(command)


def clear_options(command: Any) -> Any:
    options = [
        click.option("--no-pool", "clear_pool", is_flag=True, help="Remove the job's pool."),
        click.option("--no-dedup-key", "clear_dedup_key", is_flag=True,
                     help="Remove the job's dedup key: a fire is no longer skipped while a task "
                          "with that key is open."),
        click.option("--no-variants", "clear_variants", is_flag=True,
                     help="Remove the job's variants: every fire uses the job's own prompt."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@jobs_group.command("list")
@json_option
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """List jobs with their trigger, next fire and last outcome (the config's too, before a
    daemon has synced them)."""
    with job_queue(ctx, writes=False) as queue:
        jobs = job_ops.list_jobs(queue, now())
    if as_json:
        print_json(jobs)
        return
    print_table(
        ["name", "on", "source", "trigger", "zone", "next", "last", "fails"],
        [[j["name"], "yes" if j["enabled"] else "no",
          j["source"] if j["synced"] else f"{j['source']} (not synced: `taskherd up` applies it)",
          describe_trigger(j["trigger"]), j["timezone"],
          format_time(j["next_run_at"]) if j["enabled"] else "-",
          j["last_fire"]["status"] if j["last_fire"] else None, j["failures"]] for j in jobs],
    )


@jobs_group.command("get")
@click.argument("name")
@click.option("--fires", "fire_count", type=click.IntRange(min=0), default=10, show_default=True,
              help="How many recent fires to show.")
@json_option
@click.pass_context
def get_command(ctx: click.Context, name: str, fire_count: int, as_json: bool) -> None:
    """One job: its definition, state and recent fires."""
    with job_store(ctx, writes=False) as store:
        job = store.get_job(name)
        fires = store.list_fires(job=name, limit=fire_count) if fire_count else []
    if as_json:
        print_json(job.to_dict() | {"fires": [fire.to_dict() for fire in fires]})
        return
    for key, value in _job_lines(job):
        click.echo(f"{key:>14}: {value}")
    if fires:
        click.echo("")
        print_table(
            ["fire", "scheduled", "kind", "status", "task", "retry", "took", "summary / error"],
            [[f.id, format_time(f.scheduled_for), f.kind, f.status, f.task_id,
              f"{f.retry_count} of {f.retry_of}" if f.retry_of else None,
              f"{f.duration:.1f}s" if f.duration is not None else None,
              _clip(f.summary or f.error or "", 60)] for f in fires],
        )


def _job_lines(job: Job) -> list[tuple[str, Any]]:
    return [
        ("name", job.name), ("source", job.source), ("enabled", job.enabled),
        ("trigger", describe_trigger(job.trigger)), ("timezone", job.timezone),
        ("role", job.template.get("role")), ("title", job.template.get("title")),
        ("overlap", job.overlap), ("missed_fire", job.missed_fire),
        ("max_retries", job.max_retries), ("next run", format_time(job.next_run_at)),
        ("schedule at", format_time(job.schedule_at)), ("failures", job.failures),
        ("backoff until", format_time(job.backoff_until)), ("retry at", format_time(job.retry_at)),
        ("queued", job.queued), ("open tasks", job.open_fires),
        ("variants", len(job.template.get("variants") or [])),
        ("delete after", job.delete_after_run),
    ]


@jobs_group.command("add")
@click.argument("name")
@job_options
@json_option
@click.pass_context
def add_command(ctx: click.Context, name: str, as_json: bool, **options: Any) -> None:
    """Add a job (stored with source 'cli'; a config sync leaves it alone)."""
    table = {"name": name} | _table_from_options(options)
    with job_queue(ctx) as queue:
        job = job_ops.add_job(queue, table, now())
    _echo_job(job, "added", as_json)


@jobs_group.command("update")
@click.argument("name")
@job_options
@clear_options
@json_option
@click.pass_context
def update_command(ctx: click.Context, name: str, as_json: bool, **options: Any) -> None:
    """Change a CLI-made job: options not given keep their value; --no-pool, --no-dedup-key
    and --no-variants remove one."""
    cleared = _cleared_fields(options)
    with job_queue(ctx) as queue:
        job = job_ops.update_job(queue, name, _table_from_options(options), now(), clear=cleared)
    _echo_job(job, "updated", as_json)


def _cleared_fields(options: dict[str, Any]) -> list[str]:
    """The fields a --no-… flag removes (taking the flags out of `options`). A field both set
    and cleared is refused: either reading would surprise whoever wrote the command."""
    cleared = []
    for key, set_option, clear_option in CLEARABLE:
        if not options.pop(f"clear_{key}"):
            continue
        if options.get(key) not in (None, ()):
            raise BadInput(f"{key}: {set_option} sets it and {clear_option} removes it; "
                           "give one of them, not both")
        cleared.append(key)
    return cleared


def _table_from_options(options: dict[str, Any]) -> dict[str, Any]:
    for key, set_option, clear_option in CLEARABLE:
        # `--window ''` removes a window, so `--pool ''` looks like a way to remove a pool;
        # an empty dedup key was instead stored as a key, holding back fires that share it.
        if key != "variants" and options.get(key) is not None and not options[key].strip():
            raise BadInput(f"{set_option} {options[key]!r}: expected a non-empty {key} "
                           f"(to remove the job's {key}: "
                           f"`taskherd jobs update NAME {clear_option}`)")
    table = {key: value for key, value in options.items()
             if value is not None and key not in ("calendar", "variants")}
    if options.get("calendar"):
        table["calendar"] = _calendar(options["calendar"])
    if options.get("variants"):
        table["variants"] = [{"prompt": prompt} for prompt in options["variants"]]
    return table


def _calendar(entries: tuple[str, ...]) -> Any:
    if len(entries) == 1 and entries[0].lstrip().startswith(("[", "{")):
        try:
            return json.loads(entries[0])
        except json.JSONDecodeError as error:
            raise BadInput(f"--calendar {entries[0]!r}: not valid JSON: {error.msg}") from error
    parsed = []
    for entry in entries:
        table: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in entry.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not value.strip().lstrip("-").isdigit():
                raise BadInput(f"--calendar {entry!r}: expected key=number pairs such as "
                               "'hour=9,minute=0' (keys: minute, hour, day, month, weekday)")
            table[key.strip()] = int(value)
        parsed.append(table)
    return parsed


def _echo_job(job: Job, verb: str, as_json: bool) -> None:
    if as_json:
        print_json(job.to_dict())
    else:
        nxt = format_time(job.next_run_at) if job.enabled and job.next_run_at else "never by itself"
        click.echo(f"{verb} job {job.name!r} ({describe_trigger(job.trigger)} {job.timezone}); "
                   f"next fire: {nxt}")


@jobs_group.command("enable")
@click.argument("name")
@click.pass_context
def enable_command(ctx: click.Context, name: str) -> None:
    """Enable a job; its schedule restarts from now (missed fires are not caught up)."""
    with job_queue(ctx) as queue:
        job = job_ops.enable_job(queue, name, now())
    click.echo(f"enabled job {name!r}; next fire: {format_time(job.next_run_at)}")


@jobs_group.command("disable")
@click.argument("name")
@click.pass_context
def disable_command(ctx: click.Context, name: str) -> None:
    """Disable a job (a config job is enabled again by the next sync unless the file says so)."""
    with job_queue(ctx) as queue:
        job_ops.disable_job(queue, name, now())
    click.echo(f"disabled job {name!r}")


@jobs_group.command("delete")
@click.argument("name")
@click.pass_context
def delete_command(ctx: click.Context, name: str) -> None:
    """Delete a CLI-made job; its fire history is kept."""
    with job_queue(ctx) as queue:
        orphans = job_ops.delete_job(queue, name, now())
    click.echo(f"deleted job {name!r}")
    for orphan in orphans:
        click.echo(f"disabled job {orphan!r}: it followed {name!r}, which is gone "
                   f"(give it another --parent, then `taskherd jobs enable {orphan}`)")


@jobs_group.command("tree")
@json_option
@click.pass_context
def tree_command(ctx: click.Context, as_json: bool) -> None:
    """Jobs by the job they follow: each chain from its first job."""
    with job_queue(ctx, writes=False) as queue:
        roots = job_ops.job_tree(queue)
    if as_json:
        print_json(roots)
        return
    if not roots:
        click.echo("no jobs")
    for root in roots:
        for line in _tree_lines(root, "", True, True):
            click.echo(line)


def _tree_lines(node: dict[str, Any], prefix: str, last: bool, top: bool) -> list[str]:
    link = ""
    if "parent" in node:
        link = f" (on {node['on']}" + (f", when {node['when']}" if node.get("when") else "")
        link += (f", after {node['delay']:g}s" if node.get("delay") else "") + ")"
    state = "" if node["enabled"] else " [disabled]"
    orphan = f" [its parent {node['parent']!r} is gone]" if node.get("orphan") else ""
    task = f" task {node['open_task_id']} open" if node.get("open_task_id") else ""
    branch = "" if top else ("└─ " if last else "├─ ")
    lines = [f"{prefix}{branch}{node['name']}{link}{state}{orphan}{task}"]
    inner = prefix + ("" if top else ("   " if last else "│  "))
    for index, child in enumerate(node["children"]):
        lines += _tree_lines(child, inner, index == len(node["children"]) - 1, False)
    return lines


@jobs_group.command("cancel")
@click.argument("name")
@json_option
@click.pass_context
def cancel_command(ctx: click.Context, name: str, as_json: bool) -> None:
    """Cancel the job's open task, and the open tasks of the jobs that follow it."""
    with job_queue(ctx) as queue:
        cancelled = job_ops.cancel_job(queue, name, now())
    if as_json:
        print_json([task.to_dict() for task in cancelled])
        return
    if not cancelled:
        click.echo(f"job {name!r} and the jobs after it have no open task")
    for task in cancelled:
        click.echo(f"task {task.id} ({task.role}) is now cancelled")


@jobs_group.command("run")
@click.argument("name")
@click.pass_context
def run_command(ctx: click.Context, name: str) -> None:
    """Fire the job at the scheduler's next tick, without moving its schedule."""
    with job_queue(ctx) as queue:
        job_ops.run_job_now(queue, name, now())
    click.echo(f"job {name!r} fires at the next tick")


@jobs_group.command("next")
@click.argument("name", required=False)
@trigger_options
@click.option("--count", "-n", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--from", "start", help="Start from this ISO date-time instead of now.")
@json_option
@click.pass_context
def next_command(ctx: click.Context, name: str | None, count: int, start: str | None,
                 as_json: bool, **options: Any) -> None:
    """The next fire times of a job, or of an expression (--cron/--every/--calendar/--at)."""
    trigger = _preview_trigger(ctx, name, options)
    moment = _start(start, trigger.tz)
    fires = next_fires(trigger, moment, count)
    if as_json:
        print_json([{"local": f.astimezone(trigger.tz).isoformat(), "utc": f.isoformat(),
                     "unix": f.timestamp()} for f in fires])
        return
    if not fires:
        click.echo("no fire times: this trigger never fires again (or only by hand)")
    for fire in fires:
        local = fire.astimezone(trigger.tz)
        click.echo(f"{local:%Y-%m-%d %H:%M:%S %Z (%a)}   {fire:%Y-%m-%d %H:%M:%S} UTC")


def _preview_trigger(ctx: click.Context, name: str | None, options: dict[str, Any]) -> Any:
    table = _table_from_options({k: v for k, v in options.items() if v not in (None, ())})
    given = [key for key in TRIGGER_OPTIONS if key in table]
    if name is not None and given:
        raise BadInput("give a job name or a trigger (--cron, --every, …), not both")
    if name is not None:
        with job_store(ctx, writes=False) as store:
            return trigger_of(store.get_job(name))
    if not given:
        raise BadInput("give a job name or a trigger: "
                       "--cron, --every [--window], --calendar or --at")
    try:
        return parse_trigger(table, get_config(ctx).daemon.timezone)
    except ScheduleError as error:
        raise BadInput(str(error)) from error


def _start(text: str | None, tz: ZoneInfo) -> datetime:
    if text is None:
        return datetime.fromtimestamp(now(), UTC)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as error:
        raise BadInput(f"--from {text!r}: expected an ISO date-time such as 2026-03-08T00:00")\
            from error
    return moment if moment.tzinfo else moment.replace(tzinfo=tz)


@click.command("reload")
@click.pass_context
def reload_command(ctx: click.Context) -> None:
    """Check the config file, then have the running daemon re-read it and sync its jobs."""
    # late: the daemon module pulls in every service
    from taskherd.cli.daemon import signal_daemon
    from taskherd.daemon import NodeLock

    try:
        config = load_config(ctx.find_root().params.get("config"))
    except ConfigError as error:
        raise BadInput(str(error)) from error
    pid = signal_daemon(NodeLock(config.daemon), signal.SIGHUP,
                        f"no daemon is running for node {config.daemon.node!r}; its jobs are "
                        "synced when it starts")
    click.echo(f"config OK ({len(config.jobs)} jobs); daemon pid {pid} is reloading it")


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
