"""`taskherd cooldown list|clear`: runtimes paused by a rate limit or a down endpoint."""

from __future__ import annotations

import click

from taskherd.cli.common import (
    Refused,
    format_time,
    json_option,
    now,
    print_json,
    print_table,
    queue_for,
)
from taskherd.ops import cooldowns as cooldown_ops


@click.group("cooldown")
def cooldown_group() -> None:
    """Runtimes paused by a rate limit or their endpoint being down."""


@cooldown_group.command("list")
@json_option
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """Show active cooldowns and when they end."""
    with queue_for(ctx, writes=False) as queue:
        cooldowns = cooldown_ops.active_cooldowns(queue, now())
    if as_json:
        print_json([c.__dict__ for c in cooldowns])
    elif not cooldowns:
        click.echo("no runtime is cooling down")
    else:
        print_table(["runtime", "until", "reason"],
                    [[c.runtime, format_time(c.until), c.reason] for c in cooldowns])


@cooldown_group.command("clear")
@click.argument("runtime")
@click.pass_context
def clear_command(ctx: click.Context, runtime: str) -> None:
    """End RUNTIME's cooldown now: its tasks may start again."""
    with queue_for(ctx) as queue:
        if not cooldown_ops.clear_cooldown(queue, runtime):
            raise Refused(f"runtime {runtime!r} has no cooldown")
    click.echo(f"cooldown of {runtime} cleared")
