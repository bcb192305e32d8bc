"""`taskherd up` and `taskherd stop`: run the daemon in the foreground, or stop it."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

import click

from taskherd.cli.common import Refused, get_config
from taskherd.daemon import DaemonError, NodeLock, run_daemon


@click.command("up")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
@click.pass_context
def up_command(ctx: click.Context, log_level: str) -> None:
    """Run the daemon in the foreground (a service manager keeps it running)."""
    config = get_config(ctx)
    logging.basicConfig(
        level=getattr(logging, log_level.upper()), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        run_daemon(config)
    except DaemonError as error:
        raise Refused(str(error)) from error


@click.command("stop")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for the daemon to exit.")
@click.pass_context
def stop_command(ctx: click.Context, timeout: float) -> None:
    """Ask the running daemon to stop (SIGTERM) and wait until it has."""
    config = get_config(ctx)
    lock = NodeLock(config.daemon)
    pid = lock.holder_pid()
    if pid is None:
        raise Refused(f"no daemon is running for node {config.daemon.node!r}")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while lock.holder_pid() is not None:
        if time.monotonic() > deadline:
            raise Refused(f"daemon pid {pid} did not stop within {timeout:g}s")
        time.sleep(0.1)
    click.echo(f"daemon pid {pid} stopped")
