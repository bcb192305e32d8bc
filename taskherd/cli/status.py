"""`taskherd status`: the queue at a glance, by state and role."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from taskherd.cli.common import (
    BadInput,
    format_time,
    json_option,
    now,
    print_json,
    print_table,
    queue_for,
    store_for,
)
from taskherd.model import TaskState
from taskherd.ops.board import node_rows, status_board
from taskherd.policy.costs import cost_text
from taskherd.policy.durations import parse_duration

__all__ = ["node_rows", "status_command"]


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
    with queue_for(ctx, writes=False) as queue:
        board = status_board(queue, now())
    if as_json:
        print_json(board)
        return
    by_role, spend, nodes, cooldowns = (board["by_role"], board["cost"], board["nodes"],
                                        board["cooldowns"])
    _print_nodes(nodes)
    _print_backup(board["backup"])
    for row in board["unserved"]:
        tags = ", ".join(row["needs_tags"])
        needs = f" (it needs a node tagged {tags})" if tags else ""
        click.echo(f"role {row['role']}: {row['ready']} ready task(s) wait, no live node can "
                   f"take them{needs}; up: {', '.join(row['up']) or 'none'}")
    _print_p0_waiting(board["p0_waiting"])
    for down in board["endpoints_down"]:
        probe = ("a probe request is asking it now" if down["probing"]
                 else f"the next probe request at {format_time(down['next_probe'])}")
        click.echo(f"runtime {down['runtime']}: endpoint down since {format_time(down['since'])}"
                   f" ({down['reason']}); its tasks wait (no strike), {probe}")
    for cooldown in cooldowns:
        if cooldown["down_since"] is not None:
            continue  # said above, as its endpoint being down
        if cooldown["runtime"].startswith("budget:"):
            scope = cooldown["runtime"].removeprefix("budget:")
            who = "the fleet" if scope == "fleet" else f"role {scope}"
            click.echo(f"{who} is paused by its budget until {format_time(cooldown['until'])}"
                       f" ({cooldown['reason']}); `taskherd budget status` shows the spend")
            continue
        click.echo(f"runtime {cooldown['runtime']} is rate-limited until "
                   f"{format_time(cooldown['until'])} ({cooldown['reason']}); "
                   f"`taskherd cooldown clear {cooldown['runtime']}` ends it")
    if not by_role:
        click.echo("the queue is empty")
        return
    states = [s.value for s in TaskState]
    rows = [[role] + [row[s] or "." for s in states] for role, row in sorted(by_role.items())]
    rows.append(["total"] + [sum(row[s] for row in by_role.values()) or "." for s in states])
    print_table(["role"] + states, rows)
    _print_spend(spend)


def _print_nodes(nodes: list[dict[str, Any]]) -> None:
    if not nodes:
        click.echo("no daemon has run on this database yet: `taskherd up` starts one")
        return
    for node in nodes:
        if node["status"] == "up":
            state = f"up since {format_time(node['started_at'])}"
        elif node["status"] == "stopped":
            state = f"stopped at {format_time(node['stopped_at'])}"
        elif node.get("down_by"):
            state = (f"DOWN: declared by {node['down_by']}, last seen "
                     f"{format_time(node['last_seen'])}")
        else:
            state = f"DOWN: last seen {format_time(node['last_seen'])}"
        orphans = (f"; {node['orphaned_runs']} run(s) orphaned until another node rescues them"
                   if node["orphaned_runs"] else "")
        tags = f", tags {', '.join(node['tags'])}" if node.get("tags") else ""
        paused = (f"; PAUSED since {format_time(node['paused_at'])}, starts nothing new: "
                  f"{node['paused_reason']}" if node["status"] == "up" and node.get("paused_at")
                  else "")
        click.echo(f"node {node['name']} ({node['host']}, pid {node['pid']}, taskherd "
                   f"{node['version']}{tags}): {state}, {node['open_runs']} running{orphans}"
                   f"{paused}")
    click.echo("")


def _print_backup(backup: dict[str, Any]) -> None:
    if backup["target"] is None:
        return
    last = backup["last_snapshot"]
    # From the data dir, without asking the target: what this node last stored, which the
    # target may no longer hold (`backup status` reads the target).
    line = (f"backups: last stored {last['key']} at {format_time(last['taken_at'])} "
            f"({last['bytes'] / 1e6:.1f} MB)" if last else "backups: none taken yet")
    if backup["failures_in_a_row"]:
        line += (f"; FAILING ({backup['failures_in_a_row']} in a row): "
                 f"{backup['last_failure']['error']}")
    click.echo(f"{line}; `taskherd backup status` for more\n")


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
    from taskherd.ops.views import Screen, board_lines, read_board

    screen = Screen(sys.stdout.isatty())
    started = time.monotonic()
    with store_for(ctx, writes=False) as store:
        try:
            while True:
                screen.draw(time.monotonic() - started, board_lines(read_board(store)))
                time.sleep(seconds)
        except KeyboardInterrupt:
            pass  # the person is done watching


def _print_p0_waiting(rows: list[dict[str, Any]], shown: int = 10) -> None:
    for row in rows[:shown]:
        click.echo(f"P0 task {row['task_id']} ({row['role']}) waits: {row['waits_for']}")
    if len(rows) > shown:
        click.echo(f"… and {len(rows) - shown} more P0 task(s) waiting (see the dashboard)")


def _print_spend(spend: list[dict[str, Any]]) -> None:
    if not any(row["runs_week"] for row in spend):
        return
    click.echo("")
    print_table(
        ["role", "runs today", "cost today", "tokens today (in/out)", "runs 7d", "cost 7d"],
        [[r["role"], r["runs_today"], cost_text(r["cost_today"], r["unpriced_today"]),
          f"{r['input_tokens_today']}/{r['output_tokens_today']}", r["runs_week"],
          cost_text(r["cost_week"], r["unpriced_week"])] for r in spend],
    )
