"""The `taskherd` command: one module per command group."""

from __future__ import annotations

import click

from taskherd import __version__
from taskherd.cli.agent import REPORT_COMMANDS, heartbeat_command
from taskherd.cli.backup import backup_command
from taskherd.cli.cooldown import cooldown_group
from taskherd.cli.daemon import stop_command, up_command
from taskherd.cli.doctor import doctor_command
from taskherd.cli.jobs import jobs_group, reload_command
from taskherd.cli.runs import runs_group
from taskherd.cli.service import service_group
from taskherd.cli.setup import init_command
from taskherd.cli.status import status_command
from taskherd.cli.tasks import task_group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    help="Config file (default: $TASKHERD_CONFIG, else ./taskherd.toml).",
)
@click.version_option(__version__, prog_name="taskherd")
@click.pass_context
def cli(ctx: click.Context, config: str | None) -> None:
    """taskherd: a durable queue, scheduler and supervisor for fleets of AI agents."""
    ctx.ensure_object(dict)


cli.add_command(init_command)
cli.add_command(task_group)
cli.add_command(status_command)
cli.add_command(cooldown_group)
cli.add_command(up_command)
cli.add_command(stop_command)
cli.add_command(heartbeat_command)
cli.add_command(jobs_group)
cli.add_command(backup_command)
cli.add_command(runs_group)
cli.add_command(reload_command)
cli.add_command(service_group)
cli.add_command(doctor_command)
for report_command in REPORT_COMMANDS:
    cli.add_command(report_command)


def main() -> None:
    cli(prog_name="taskherd")
