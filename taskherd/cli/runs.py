"""`taskherd runs …`: what agents did — history with cost and tokens, what runs now, what
looks stuck, and cost summed per role or per day."""

from __future__ import annotations

import click

from taskherd.cli.common import (
    BadInput,
    format_time,
    json_option,
    liveness_words,
    now,
    print_json,
    print_table,
    queue_for,
    since_moment,
)
from taskherd.cli.log_options import check_log_options, log_options
from taskherd.model import Run
from taskherd.ops import jobs as job_ops
from taskherd.ops import runs as run_ops
from taskherd.policy.costs import cost_text
from taskherd.policy.durations import parse_duration


@click.group("runs")
def runs_group() -> None:
    """Agent runs: history, cost, what is running and what looks stale."""


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
    with queue_for(ctx, writes=False) as queue:
        if job is not None:
            _check_job(queue, job)
            runs = run_ops.runs_of_job(queue, job, role=role, since=since_moment(since, started),
                                       limit=limit)
        else:
            runs = run_ops.list_runs(queue, role=role, since=since_moment(since, started),
                                     limit=limit)
        liveness = run_ops.open_liveness(queue, runs, started)
    if as_json:
        print_json([run.to_dict() | {"duration": _duration(run, started),
                                     "liveness": liveness.get(run.id)} for run in runs])
        return
    # An open run's outcome column names the verdict on it and the next threshold.
    print_table(
        ["run", "task", "role", "outcome", "started", "took", "cost", "tokens in/out"],
        [[r.id, r.task_id, r.role,
          r.outcome.value if r.outcome else liveness_words(liveness[r.id]),
          format_time(r.spawned_at or r.claimed_at), _took(_duration(r, started)),
          _cost(r.cost_usd), _tokens(r)] for r in runs],
    )


@runs_group.command("running")
@json_option
@click.pass_context
def running_command(ctx: click.Context, as_json: bool) -> None:
    """Runs that have not ended, on every node."""
    started = now()
    with queue_for(ctx, writes=False) as queue:
        runs = run_ops.open_runs(queue)
        liveness = run_ops.open_liveness(queue, runs, started)
    if as_json:
        print_json([run.to_dict() | {"elapsed": _duration(run, started),
                                     "last_activity": run_ops.last_activity(run),
                                     "liveness": liveness.get(run.id)} for run in runs])
        return
    print_table(
        ["run", "task", "role", "node", "pid", "started", "elapsed", "last activity",
         "liveness"],
        [[r.id, r.task_id, r.role, r.node, r.pid, format_time(r.spawned_at or r.claimed_at),
          _took(_duration(r, started)), format_time(run_ops.last_activity(r)),
          liveness_words(liveness[r.id])] for r in runs],
    )


@runs_group.command("stale")
@click.option("--after", help="Idle this long counts as stale (default: the role's idle_timeout).")
@json_option
@click.pass_context
def stale_command(ctx: click.Context, after: str | None, as_json: bool) -> None:
    """Open runs that look stuck: lease expired, never spawned, or silent too long."""
    started = now()
    limit = None
    if after is not None:
        try:
            limit = parse_duration(after, field="--after")
        except ValueError as error:
            raise BadInput(str(error)) from error
    with queue_for(ctx, writes=False) as queue:
        stale = run_ops.stale_runs(queue, started, limit)
    if as_json:
        print_json([run.to_dict() | {"reason": why} for run, why in stale])
        return
    print_table(["run", "task", "role", "node", "pid", "last activity", "why"],
                [[r.id, r.task_id, r.role, r.node, r.pid,
                  format_time(run_ops.last_activity(r)), why] for r, why in stale])


@runs_group.command("log")
@click.argument("run_id", type=int)
@log_options
@click.pass_context
def log_command(ctx: click.Context, run_id: int, lines: int | None, follow: bool, raw: bool,
                as_json: bool) -> None:
    """Print what a run's agent wrote (its log), or follow it until the run ends."""
    check_log_options(lines, follow, as_json)
    from taskherd.cli.logs import show_log

    with queue_for(ctx, writes=False) as queue:
        show_log(queue, run_ops.get_run(queue, run_id), lines=lines, follow=follow,
                 as_json=as_json, raw=raw)


@runs_group.command("cost")
@click.option("--by", type=click.Choice(["role", "day"]), default="role", show_default=True)
@click.option("--since", default="7d", show_default=True, help="Runs started within this long.")
@json_option
@click.pass_context
def cost_command(ctx: click.Context, by: str, since: str, as_json: bool) -> None:
    """Cost (USD) and tokens summed per role or per day (days in [daemon] timezone)."""
    with queue_for(ctx, writes=False) as queue:
        started = now()
        rows = run_ops.cost(queue, by, since_moment(since, started), started)
    if as_json:
        print_json(rows)
        return
    print_table([by, "runs", "cost", "tokens in", "tokens out"],
                [[r[by], r["runs"], cost_text(r["cost_usd"], r["unpriced_runs"]), r["input_tokens"],
                  r["output_tokens"]]
                 for r in rows])


def _check_job(queue, name: str) -> None:
    """JOB names a job: a role's name, or a name no job has, is said so (not an empty
    table)."""
    from taskherd.store.jobs import JobNotFound

    try:
        job_ops.find_job(queue, name)
    except JobNotFound:
        if name in queue.config.roles:
            raise BadInput(f"{name!r} is a role, not a job: `taskherd runs list --role {name}`"
                           ) from None
        raise BadInput(f"no job named {name!r} (`taskherd jobs list` names them; "
                       "`--role NAME` lists a role's runs)") from None


def _duration(run: Run, started: float) -> float:
    begin = run.spawned_at or run.claimed_at
    # Never below 0: a run spawned on another node whose clock runs a little ahead, or just
    # after this command read the time, printed "-0.0s".
    return max(0.0, round((run.ended_at if run.ended_at is not None else started) - begin, 3))


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
