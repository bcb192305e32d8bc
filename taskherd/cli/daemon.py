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
    pid = signal_daemon(lock, signal.SIGTERM, f"no daemon is running for node "
                        f"{config.daemon.node!r}")
    deadline = time.monotonic() + timeout
    while _holder(lock) is not None:
        if time.monotonic() > deadline:
            raise Refused(f"daemon pid {pid} did not stop within {timeout:g}s")
        time.sleep(0.1)
    click.echo(f"daemon pid {pid} stopped")


def signal_daemon(lock: NodeLock, signum: int, none_running: str) -> int:
    """Send `signum` to the daemon holding the node's lock: its pid. Refused on one line when
    none holds it, or the one that did has vanished (it died between the look and the
    signal, or its lock outlives it in a process it left), or belongs to another user."""
    pid = _holder(lock)
    if pid is None:
        raise Refused(none_running)
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        raise Refused(f"the daemon's lock names pid {pid}, which is gone: the daemon ended "
                      f"meanwhile, or a process it left holds {lock.path}; `taskherd status` "
                      "shows the node, `taskherd up` starts a daemon") from None
    except PermissionError:
        raise Refused(f"daemon pid {pid} is another user's: run this as that user") from None
    return pid


def _holder(lock: NodeLock) -> int | None:
    try:
        return lock.holder_pid()
    except OSError as error:
        raise Refused(f"cannot read the daemon's lock {lock.path}: {error.strerror}; run "
                      "this as the daemon's user") from None
