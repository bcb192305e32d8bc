"""`taskherd status`: the queue at a glance, by state and role."""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from datetime import datetime
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
from taskherd.cli.runs import ALL, sum_cost
from taskherd.cli.views import Screen, board_lines, read_board
from taskherd.durations import parse_duration
from taskherd.model import Run, TaskState
from taskherd.store.nodes import Node

WEEK = 7 * 86400


@click.command("status")
@json_option
@click.option("--watch", "-w", is_flag=True,
              help="Keep showing the queue and what each running agent last wrote (Ctrl-C ends).")
@click.option("--interval", default="1s", show_default=True,
              help="With --watch: time between two looks, e.g. '2s' or '0.5'.")
@click.pass_context
def status_command(ctx: click.Context, as_json: bool, watch: bool, interval: str) -> None:
    """Count tasks by state and role; active cooldowns; cost per role today and this week."""
    if watch:
        _watch(ctx, as_json, interval)
        return
    started = now()
    with store_for(ctx) as store:
        counts = store.counts()
        cooldowns = store.active_cooldowns(started)
        week = store.list_runs(since=started - WEEK, limit=ALL)
        nodes = node_rows(store.list_nodes(), store.open_runs(), started)
    spend = _spend_by_role(week, _midnight(get_config(ctx).daemon.timezone, started))
    by_role: dict[str, dict[str, int]] = defaultdict(lambda: {s.value: 0 for s in TaskState})
    for count in counts:
        by_role[count.role][count.state.value] += count.count
    if as_json:
        totals = {s.value: sum(row[s.value] for row in by_role.values()) for s in TaskState}
        print_json({"by_role": dict(by_role), "total": totals,
                    "cooldowns": [c.__dict__ for c in cooldowns], "cost": spend,
                    "nodes": nodes})
        return
    _print_nodes(nodes)
    for cooldown in cooldowns:
        click.echo(f"runtime {cooldown.runtime} is rate-limited until "
                   f"{format_time(cooldown.until)} ({cooldown.reason}); "
                   f"`taskherd cooldown clear {cooldown.runtime}` ends it")
    if not by_role:
        click.echo("the queue is empty")
        return
    states = [s.value for s in TaskState]
    rows = [[role] + [row[s] or "." for s in states] for role, row in sorted(by_role.items())]
    rows.append(["total"] + [sum(row[s] for row in by_role.values()) or "." for s in states])
    print_table(["role"] + states, rows)
    _print_spend(spend)


def node_rows(nodes: list[Node], open_runs: list[Run], now: float) -> list[dict[str, Any]]:
    """Each node with its status; the runs of a node that is not up are orphans: nobody
    watches them until their lease expires and a rescue puts their tasks back in the queue."""
    runs_by_node = Counter(run.node for run in open_runs)
    rows = []
    for node in nodes:
        status = node.status(now)
        rows.append(node.to_dict() | {
            "status": status,
            "open_runs": runs_by_node[node.name],
            "orphaned_runs": runs_by_node[node.name] if status != "up" else 0,
        })
    return rows


def _print_nodes(nodes: list[dict[str, Any]]) -> None:
    if not nodes:
        click.echo("no daemon has run on this database yet: `taskherd up` starts one")
        return
    for node in nodes:
        if node["status"] == "up":
            state = f"up since {format_time(node['started_at'])}"
        elif node["status"] == "stopped":
            state = f"stopped at {format_time(node['stopped_at'])}"
        else:
            state = f"DOWN: last seen {format_time(node['last_seen'])}"
        orphans = (f"; {node['orphaned_runs']} run(s) orphaned until their leases are rescued"
                   if node["orphaned_runs"] else "")
        click.echo(f"node {node['name']} ({node['host']}, pid {node['pid']}): {state}, "
                   f"{node['open_runs']} running{orphans}")
    click.echo("")


def _watch(ctx: click.Context, as_json: bool, interval: str) -> None:
    """The live board: counts by state and each running agent's last line, redrawn in place."""
    if as_json:
        raise BadInput("--watch redraws a board; it cannot be combined with --json")
    try:
        seconds = parse_duration(interval, field="--interval")
    except ValueError as error:
        raise BadInput(str(error)) from error
    if seconds <= 0:
        raise BadInput(f"--interval {interval!r}: must be more than 0")
    screen = Screen(sys.stdout.isatty())
    started = time.monotonic()
    with store_for(ctx) as store:
        try:
            while True:
                screen.draw(time.monotonic() - started, board_lines(read_board(store)))
                time.sleep(seconds)
        except KeyboardInterrupt:
            pass  # the person is done watching


def _print_spend(spend: list[dict[str, Any]]) -> None:
    if not any(row["runs_week"] for row in spend):
        return
    click.echo("")
    print_table(
        ["role", "runs today", "cost today", "tokens today (in/out)", "runs 7d", "cost 7d"],
        [[r["role"], r["runs_today"], f"${r['cost_today']:.4f}",
          f"{r['input_tokens_today']}/{r['output_tokens_today']}", r["runs_week"],
          f"${r['cost_week']:.4f}"] for r in spend],
    )


def _spend_by_role(week: list[Run], midnight: float) -> list[dict[str, Any]]:
    today = {row["role"]: row for row in sum_cost([r for r in week if r.claimed_at >= midnight],
                                                  "role", None)}
    rows = []
    for row in sum_cost(week, "role", None):
        day = today.get(row["role"], {})
        rows.append({"role": row["role"], "runs_week": row["runs"], "cost_week": row["cost_usd"],
                     "runs_today": day.get("runs", 0), "cost_today": day.get("cost_usd", 0.0),
                     "input_tokens_today": day.get("input_tokens", 0),
                     "output_tokens_today": day.get("output_tokens", 0)})
    return rows


def _midnight(timezone: str | None, moment: float) -> float:
    """Start of today in the fleet's zone (the machine's when none is stated)."""
    zone = ZoneInfo(timezone) if timezone else None
    local = datetime.fromtimestamp(moment, zone) if zone else datetime.fromtimestamp(moment)
    return local.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
