"""`taskherd backup`: a consistent copy of the queue's database, taken while the daemon runs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from taskherd.cli.common import BadInput, get_config, json_option, print_json, store_for

BACKUP_FOLDER = "backups"


@click.command("backup")
@click.argument("destination", required=False, type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def backup_command(ctx: click.Context, destination: Path | None, as_json: bool) -> None:
    """Copy the database to DESTINATION (default: backups/ in the data dir, named by time).

    The copy is consistent even while the daemon writes, passes an integrity check before it
    is put in place, and is readable by its owner only. Restore: stop the daemon, then copy
    the file over the database (and remove the database's -wal and -shm files).
    """
    config = get_config(ctx)
    if destination is None:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        destination = config.daemon.data_dir / BACKUP_FOLDER / f"taskherd-{stamp}.db"
        destination.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    elif destination.exists():
        raise BadInput(f"{destination} already exists: give a new path")
    elif not destination.parent.is_dir():
        raise BadInput(f"{destination.parent} is not a folder")
    with store_for(ctx) as store:
        store.backup(destination)
    size = destination.stat().st_size
    if as_json:
        print_json({"path": str(destination), "bytes": size})
    else:
        click.echo(f"backed up to {destination} ({size / 1e6:.1f} MB)")
