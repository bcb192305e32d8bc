"""`taskherd alias …`: delivery targets tasks tell when they settle, and what reached them."""

from __future__ import annotations

import click

from taskherd.cli.common import (
    BadInput,
    format_time,
    json_option,
    now,
    print_json,
    print_table,
    queue_for,
)
from taskherd.model.delivery import CHANNELS, FORMATS
from taskherd.ops import delivery as delivery_ops


@click.group("alias")
def alias_group() -> None:
    """Delivery targets: webhook, command or file, named @NAME in deliver_to."""


@alias_group.command("add")
@click.argument("name")
@click.argument("channel", type=click.Choice(CHANNELS))
@click.argument("target")
@click.option("--description", help="A line about it.")
@click.option("--format", "body_format", type=click.Choice(FORMATS), default="json",
              show_default=True, help="A webhook's body: taskherd's JSON, or Slack's or "
              "Discord's message shape.")
@click.pass_context
def add_command(ctx: click.Context, name: str, channel: str, target: str,
                description: str | None, body_format: str) -> None:
    """Add alias NAME: a webhook URL, a command line (run without a shell, the event as JSON
    on stdin) or an absolute file path (JSON Lines)."""
    with queue_for(ctx) as queue:
        alias = delivery_ops.add_alias(queue, name, channel, target, now(),
                                       format=body_format, description=description)
    click.echo(f"added alias @{alias.name} ({alias.channel})")


@alias_group.command("list")
@json_option
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """Every alias."""
    with queue_for(ctx, writes=False) as queue:
        aliases = delivery_ops.list_aliases(queue)
    if as_json:
        print_json([alias.__dict__ for alias in aliases])
        return
    print_table(["alias", "channel", "format", "target", "description"],
                [[f"@{a.name}", a.channel, a.format, a.target, a.description] for a in aliases])


@alias_group.command("remove")
@click.argument("name")
@click.pass_context
def remove_command(ctx: click.Context, name: str) -> None:
    """Remove an alias (what is still pending for it fails, visibly)."""
    with queue_for(ctx) as queue:
        delivery_ops.remove_alias(queue, name)
    click.echo(f"removed alias {name}")


@alias_group.command("retry")
@click.argument("delivery_id", type=int, required=False)
@click.option("--all", "every", is_flag=True, help="Every failed delivery.")
@click.pass_context
def retry_command(ctx: click.Context, delivery_id: int | None, every: bool) -> None:
    """Send a failed delivery again (its id from `alias status`), or every failed one with
    --all: due at once, with its attempts counted afresh."""
    if delivery_id is not None and every:
        raise BadInput("give a delivery's id or --all, not both")
    if delivery_id is None and not every:
        raise BadInput("give a delivery's id (taskherd alias status lists them) or --all")
    with queue_for(ctx) as queue:
        count = delivery_ops.retry(queue, now(), None if every else delivery_id)
    if every:
        click.echo(f"{count} failed deliver{'y is' if count == 1 else 'ies are'} due again")
    else:
        click.echo(f"delivery {delivery_id} is due again")


@alias_group.command("status")
@json_option
@click.pass_context
def status_command(ctx: click.Context, as_json: bool) -> None:
    """Deliveries per alias (pending, sent, failed), and the latest problems."""
    with queue_for(ctx, writes=False) as queue:
        report = delivery_ops.status(queue)
    if as_json:
        print_json(report)
        return
    print_table(["alias", "pending", "sent", "failed"],
                [[f"@{a['alias']}", a["pending"], a["sent"], a["failed"]]
                 for a in report["aliases"]])
    if report["problems"]:
        click.echo("")
        print_table(["delivery", "alias", "event", "task", "state", "attempts", "next try",
                     "error"],
                    [[p["id"], f"@{p['alias']}", p["event"], p["task_id"], p["state"],
                      p["attempts"], format_time(p["next_attempt_at"])
                      if p["state"] == "pending" else "-", (p["last_error"] or "")[:60]]
                     for p in report["problems"]])
