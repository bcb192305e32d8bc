"""`taskherd service install|uninstall|status`: keep the daemon running under systemd or launchd."""

from __future__ import annotations

from collections.abc import Callable

import click

from taskherd.cli.common import BadInput, Refused, get_config
from taskherd.daemon import NodeLock
from taskherd.host import service
from taskherd.store import shown

manager_option = click.option(
    "--manager", type=click.Choice(service.MANAGERS), default=service.default_manager,
    show_default="launchd on macOS, systemd elsewhere",
    help="Which service manager's file to write or show.",
)


@click.group("service")
def service_group() -> None:
    """Install the daemon as a user service (systemd on Linux, launchd on macOS)."""


def _spec(ctx: click.Context) -> service.ServiceSpec:
    try:
        return service.service_spec(get_config(ctx))
    except service.ServiceError as error:
        raise BadInput(str(error)) from error


@service_group.command("install")
@click.option("--print", "print_only", is_flag=True, help="Show the file; install nothing.")
@manager_option
@click.pass_context
def install_command(ctx: click.Context, print_only: bool, manager: str) -> None:
    """Write the unit (or plist) with an explicit PATH, then enable and start it."""
    spec = _spec(ctx)
    if print_only:
        click.echo(f"# {service.service_file(manager)}", err=True)
        click.echo(service.render(manager, spec), nl=False)
        return
    _report(lambda: service.install(manager, spec))
    click.echo("the daemon now starts at login and restarts if it stops; "
               "`taskherd doctor` checks what it will run with")


@service_group.command("uninstall")
@manager_option
def uninstall_command(manager: str) -> None:
    """Stop and disable the service, and remove its file."""
    _report(lambda: service.uninstall(manager))


def _report(step: Callable[[], list[str]]) -> None:
    """Print what was done; a service-manager failure still shows the steps that worked."""
    try:
        lines = step()
    except service.ManagerError as error:
        for line in error.done:
            click.echo(line)
        raise Refused(str(error)) from error
    for line in lines:
        click.echo(line)


@service_group.command("status")
@click.option("--print", "print_file", is_flag=True, help="Also show the installed file.")
@manager_option
@click.pass_context
def status_command(ctx: click.Context, print_file: bool, manager: str) -> None:
    """Say whether the service file is installed and whether the daemon runs."""
    path = service.service_file(manager)
    installed = path.is_file()
    click.echo(f"service  {'installed' if installed else 'not installed'}: {path}")
    config = get_config(ctx)
    pid = NodeLock(config.daemon).holder_pid()
    running = f"running (pid {pid})" if pid else "not running"
    click.echo(f"daemon   {running} for node {config.daemon.node!r}, "
               f"{shown(config.daemon.database)}")
    if print_file and installed:
        click.echo("")
        click.echo(path.read_text(), nl=False)
