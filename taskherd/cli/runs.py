"""`taskherd runs …`: what agents did — history with cost and tokens, what runs now, what
looks stuck, and cost summed per role or per day."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import click

from taskherd.cli.common import (
    BadInput,
    format_time,
    get_config,
    json_option,
    now,
    print_json,
    print_table,
    store_for,
)
from taskherd.cli.logs import check_log_options, log_options, show_log
from taskherd.durations import parse_duration
from taskherd.model import Run
from taskherd.store import Store
from taskherd.store.nodes import Node

ALL = 1_000_000  # "every run" for sums: the runs table is pruned with its tasks


@click.group("runs")
def runs_group() -> None:
    """Agent runs: history, cost, what is running and what looks stale."""


def _since(text: str | None, started: float) -> float | None:
    if text is None:
        return None
    try:
        return started - parse_duration(text, field="--since")
    except ValueError as error:
        raise BadInput(str(error)) from error


@runs_group.command("list")
@click.argument("job", required=False)
@click.option("--role", "-r", help="Only runs of this role.")
@click.option("--since", help="Only runs started within this long, e.g. '7d'.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
@click.pass_context
def list_command(ctx: click.Context, job: str | None, role: str | None, since: str | None,
                 limit: int, as_json: bool) -> None:
    """Runs, newest first, with outcome, duration, cost and tokens; JOB: only its tasks' runs."""
    started = now()
    with store_for(ctx) as store:
        if job is not None:
            runs = store.runs_of_job(job, since=_since(since, started), limit=limit)
            runs = [run for run in runs if role is None or run.role == role]
        else:
            runs = store.list_runs(role=role, since=_since(since, started), limit=limit)
    if as_json:
        print_json([run.to_dict() | {"duration": _duration(run, started)} for run in runs])
        return
    print_table(
        ["run", "task", "role", "outcome", "started", "took", "cost", "tokens in/out"],
        [[r.id, r.task_id, r.role, r.outcome.value if r.outcome else "running",
          format_time(r.spawned_at or r.claimed_at), _took(_duration(r, started)),
          _cost(r.cost_usd), _tokens(r)] for r in runs],
    )


@runs_group.command("running")
@json_option
@click.pass_context
def running_command(ctx: click.Context, as_json: bool) -> None:
    """Runs that have not ended, on every node."""
    started = now()
    with store_for(ctx) as store:
        runs = store.open_runs()
    if as_json:
        print_json([run.to_dict() | {"elapsed": _duration(run, started)} for run in runs])
        return
    print_table(
        ["run", "task", "role", "node", "pid", "started", "elapsed", "last activity"],
        [[r.id, r.task_id, r.role, r.node, r.pid, format_time(r.spawned_at or r.claimed_at),
          _took(_duration(r, started)), format_time(_last_activity(r))] for r in runs],
    )


@runs_group.command("stale")
@click.option("--after", help="Idle this long counts as stale (default: the role's idle_timeout).")
@json_option
@click.pass_context
def stale_command(ctx: click.Context, after: str | None, as_json: bool) -> None:
    """Open runs that look stuck: lease expired, never spawned, or silent too long."""
    config = get_config(ctx)
    started = now()
    limit = None
    if after is not None:
        try:
            limit = parse_duration(after, field="--after")
        except ValueError as error:
            raise BadInput(str(error)) from error
    with store_for(ctx) as store:
        nodes = {node.name: node for node in store.list_nodes()}
        stale = [(run, why) for run in store.open_runs()
                 if (why := _node_down(nodes.get(run.node), started)
                     or _stale_reason(store, config, run, started, limit))]
    if as_json:
        print_json([run.to_dict() | {"reason": why} for run, why in stale])
        return
    print_table(["run", "task", "role", "node", "pid", "last activity", "why"],
                [[r.id, r.task_id, r.role, r.node, r.pid, format_time(_last_activity(r)), why]
                 for r, why in stale])


def _node_down(node: Node | None, now: float) -> str | None:
    if node is None or node.status(now) == "up":
        return None
    if node.stopped_at is not None:
        return f"its node {node.name} stopped at {format_time(node.stopped_at)}"
    return f"its node {node.name} is down (last seen {format_time(node.last_seen)})"


def _stale_reason(store: Store, config: Any, run: Run, started: float,
                  limit: float | None) -> str | None:
    role = config.role(run.role)
    task = store.get_task(run.task_id)
    if task.lease_expires_at is not None and task.lease_expires_at < started:
        return f"lease expired {started - task.lease_expires_at:.0f}s ago (node {run.node} gone?)"
    if run.spawned_at is None and started - run.claimed_at > role.spawn_timeout:
        return f"claimed {started - run.claimed_at:.0f}s ago and never spawned"
    idle = started - _last_activity(run)
    if idle > (role.idle_timeout if limit is None else limit):
        return f"no heartbeat or progress for {idle:.0f}s"
    return None


@runs_group.command("log")
@click.argument("run_id", type=int)
@log_options
@click.pass_context
def log_command(ctx: click.Context, run_id: int, lines: int | None, follow: bool, raw: bool,
                as_json: bool) -> None:
    """Print what a run's agent wrote (its log), or follow it until the run ends."""
    check_log_options(lines, follow, as_json)
    with store_for(ctx) as store:
        show_log(store, store.get_run(run_id), lines=lines, follow=follow, as_json=as_json,
                 raw=raw)


@runs_group.command("cost")
@click.option("--by", type=click.Choice(["role", "day"]), default="role", show_default=True)
@click.option("--since", default="7d", show_default=True, help="Runs started within this long.")
@json_option
@click.pass_context
def cost_command(ctx: click.Context, by: str, since: str, as_json: bool) -> None:
    """Cost (USD) and tokens summed per role or per day (days in [daemon] timezone)."""
    config = get_config(ctx)
    started = now()
    with store_for(ctx) as store:
        runs = store.list_runs(since=_since(since, started), limit=ALL)
    zone = ZoneInfo(config.daemon.timezone) if config.daemon.timezone else None
    rows = sum_cost(runs, by, zone)
    if as_json:
        print_json(rows)
        return
    print_table([by, "runs", "cost", "tokens in", "tokens out"],
                [[r[by], r["runs"], _cost(r["cost_usd"]), r["input_tokens"], r["output_tokens"]]
                 for r in rows])


def sum_cost(runs: list[Run], by: str, zone: ZoneInfo | None) -> list[dict[str, Any]]:
    sums: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"runs": 0, "cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0})
    for run in runs:
        if by == "role":
            key = run.role
        else:
            moment = datetime.fromtimestamp(run.claimed_at, UTC)
            key = (moment.astimezone(zone) if zone else moment.astimezone()).strftime("%Y-%m-%d")
        row = sums[key]
        row["runs"] += 1
        row["cost_usd"] += run.cost_usd or 0.0
        row["input_tokens"] += run.input_tokens or 0
        row["output_tokens"] += run.output_tokens or 0
    return [{by: key, **sums[key]} for key in sorted(sums)]


def _duration(run: Run, started: float) -> float:
    begin = run.spawned_at or run.claimed_at
    return round((run.ended_at if run.ended_at is not None else started) - begin, 3)


def _last_activity(run: Run) -> float:
    return max(t for t in (run.heartbeat_at, run.spawned_at, run.claimed_at) if t is not None)


def _took(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


def _cost(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _tokens(run: Run) -> str:
    if run.input_tokens is None and run.output_tokens is None:
        return "-"
    return f"{run.input_tokens or 0}/{run.output_tokens or 0}"
