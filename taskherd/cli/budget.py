"""`taskherd budget status`: what each role and the fleet spent against their limits."""

from __future__ import annotations

import click

from taskherd.cli.common import format_time, json_option, now, print_json, print_table, queue_for


@click.group("budget")
def budget_group() -> None:
    """Spending limits per role and for the fleet ([budgets] and roles.NAME.budget)."""


@budget_group.command("status")
@json_option
@click.pass_context
def status_command(ctx: click.Context, as_json: bool) -> None:
    """Spend today and this month against each limit, and what is paused until when."""
    from taskherd.ops.budget import budget_status

    with queue_for(ctx, writes=False) as queue:
        status = budget_status(queue.config, queue.store, now())
    if as_json:
        print_json(status)
        return
    if not status["limits"]:
        click.echo("no budget is set: [budgets] or roles.NAME.budget in the config")
        return
    print_table(
        ["scope", "period", "limit", "spent", "with running", "next run", "resets", "state"],
        [[line["scope"], line["period"], _amount(line["limit"], line["unit"]),
          _amount(line["spent"], line["unit"]), _amount(line["committed"], line["unit"]),
          _amount(line["expected_next"], line["unit"]) if line["unit"] == "usd" else "-",
          format_time(line["resets_at"]), "ok" if line["allows_another"] else "PAUSED"]
         for line in status["limits"]],
    )
    unknown = max((line["unknown_runs"] for line in status["limits"]), default=0)
    if unknown:
        estimate = status["unknown_run_usd"]
        click.echo(f"\n{unknown} run(s) of unknown cost this month counted as "
                   + (f"${estimate:.2f} each (budgets.unknown_run_usd)" if estimate is not None
                      else "$0: set budgets.unknown_run_usd to count them at an estimate"))
    for pause in status["paused"]:
        click.echo(f"{pause['scope']}: spawns paused until {format_time(pause['until'])}; "
                   "running agents finish")


def _amount(value: float, unit: str) -> str:
    return f"${value:,.2f}" if unit == "usd" else f"{int(value):,}"
