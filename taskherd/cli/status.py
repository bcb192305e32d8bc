"""`taskherd status`: the queue at a glance, by state and role."""

from __future__ import annotations

from collections import defaultdict

import click

from taskherd.cli.common import format_time, json_option, now, print_json, print_table, store_for
from taskherd.model import TaskState


@click.command("status")
@json_option
@click.pass_context
def status_command(ctx: click.Context, as_json: bool) -> None:
    """Count tasks by state and role."""
    with store_for(ctx) as store:
        counts = store.counts()
        cooldowns = store.active_cooldowns(now())
    by_role: dict[str, dict[str, int]] = defaultdict(lambda: {s.value: 0 for s in TaskState})
    for count in counts:
        by_role[count.role][count.state.value] += count.count
    if as_json:
        totals = {s.value: sum(row[s.value] for row in by_role.values()) for s in TaskState}
        print_json({"by_role": dict(by_role), "total": totals,
                    "cooldowns": [c.__dict__ for c in cooldowns]})
        return
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
