"""Commands an agent runs from inside its run: `taskherd heartbeat|done|fail|block`.

They read TASKHERD_RUN_ID (and the database the daemon named) from the environment the
supervisor gave the agent.
"""

from __future__ import annotations

import os

import click

from taskherd.cli.common import BadInput, get_config, now, store_for


def _run_id() -> int:
    value = os.environ.get("TASKHERD_RUN_ID")
    if not value:
        raise BadInput("TASKHERD_RUN_ID is not set: this command is run by an agent inside a run")
    try:
        return int(value)
    except ValueError:
        raise BadInput(f"TASKHERD_RUN_ID = {value!r} is not a run id") from None


@click.command("heartbeat")
@click.option("--progress", help="A short note on how far the work is.")
@click.pass_context
def heartbeat_command(ctx: click.Context, progress: str | None) -> None:
    """Tell the daemon this run is alive (and optionally how far it is)."""
    run_id = _run_id()
    with store_for(ctx) as store:
        store.heartbeat(run_id, now(), get_config(ctx).daemon.lease, progress)


def _report(verdict: str, doc: str) -> None:
    @click.command(verdict, help=doc)
    @click.option("--summary", "-s", help="What was done, or why not.")
    @click.pass_context
    def command(ctx: click.Context, summary: str | None) -> None:
        run_id = _run_id()
        with store_for(ctx) as store:
            store.report(run_id, verdict, now(), summary)
        click.echo(f"run {run_id}: reported {verdict}")

    REPORT_COMMANDS.append(command)


REPORT_COMMANDS: list[click.Command] = []
_report("done", "Report this run's task as done; it settles when the agent exits.")
_report("fail", "Report that this run failed (a strike); it settles when the agent exits.")
_report("block", "Report that this task needs a human; it settles when the agent exits.")
