"""`taskherd backup …`: snapshots to the configured target, their list and status, restore and
verify; and `backup copy`, a consistent copy of the database to a local file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from taskherd.cli.common import (
    BadInput,
    Refused,
    format_time,
    get_config,
    json_option,
    now,
    print_json,
    print_table,
    store_for,
)

BACKUP_FOLDER = "backups"


@click.group("backup")
def backup_group() -> None:
    """Back up the database to [backup] target (a folder or s3://bucket/prefix), restore it.

    The daemon takes a snapshot every snapshot_every and a rollup every rollup_every by
    itself; these commands do the same by hand, and restore.
    """


@contextmanager
def _refusals() -> Iterator[None]:
    """A backup that cannot be done exits 1 with its reason; a bad argument exits 2."""
    from taskherd import ops
    from taskherd.backups.targets import BackupError

    try:
        yield
    except BackupError as error:
        raise Refused(str(error)) from error
    except ops.BadInput as error:
        raise BadInput(str(error)) from error


def _take(ctx: click.Context, kind: str, as_json: bool) -> None:
    from taskherd.ops.backups import take_backup

    config = get_config(ctx)
    if config.backup.target is None:
        raise BadInput("no [backup] target is configured: set it to a folder or to "
                       "s3://bucket/prefix (or use `taskherd backup copy PATH`)")
    with store_for(ctx) as store, _refusals():
        result = take_backup(config, store, [kind], now())
    if as_json:
        print_json(result)
        return
    for stored in result["stored"]:
        click.echo(f"stored {stored['key']} in {stored['target']} "
                   f"({stored['bytes'] / 1e6:.1f} MB, database {stored['database_bytes'] / 1e6:.1f} MB)")
    if result["pruned"]:
        click.echo(f"pruned {result['pruned']} backup(s) past retention")


@backup_group.command("snapshot")
@json_option
@click.pass_context
def snapshot_command(ctx: click.Context, as_json: bool) -> None:
    """Take a snapshot now and store it in the target (snapshots/DAY/HH-MM)."""
    _take(ctx, "snapshots", as_json)


@backup_group.command("rollup")
@json_option
@click.pass_context
def rollup_command(ctx: click.Context, as_json: bool) -> None:
    """Take a snapshot now and store it as this hour's rollup (rollups/DAY/HH)."""
    _take(ctx, "rollups", as_json)


@backup_group.command("list")
@json_option
@click.pass_context
def list_command(ctx: click.Context, as_json: bool) -> None:
    """Every backup in the target, oldest first."""
    from taskherd.ops.backups import list_backups

    with _refusals():
        backups = list_backups(get_config(ctx))
    if as_json:
        print_json([backup.to_dict() for backup in backups])
        return
    if not backups:
        click.echo("no backups in the target yet")
        return
    print_table(["key", "kind", "taken", "MB"],
                [[b.key, b.kind, format_time(b.taken_at), f"{b.size / 1e6:.1f}"]
                 for b in backups])


@backup_group.command("status")
@json_option
@click.pass_context
def status_command(ctx: click.Context, as_json: bool) -> None:
    """The latest snapshot and rollup, how many the target holds and their size, failures."""
    from taskherd.ops.backups import backup_status

    status = backup_status(get_config(ctx))
    if as_json:
        print_json(status)
        return
    for line in status_lines(status):
        click.echo(line)


def status_lines(status: dict[str, Any]) -> list[str]:
    """`backup status` in words (also the backup line of `taskherd status`)."""
    if status["target"] is None:
        return ["backups: none configured ([backup] target)"]
    lines = [f"backups to {status['target']}"]
    for kind in ("snapshots", "rollups"):
        held = status.get(kind)
        last = status[f"last_{kind[:-1]}"]
        latest = f"latest {last['key']} at {format_time(last['taken_at'])}" if last else "none yet"
        counted = f"; {held['count']} kept, {held['bytes'] / 1e6:.1f} MB" if held else ""
        lines.append(f"  {kind}: {latest}{counted}")
    if status.get("target_error"):
        lines.append(f"  target unreachable: {status['target_error']}")
    if status["failures_in_a_row"]:
        failure = status["last_failure"]
        lines.append(f"  FAILING: {status['failures_in_a_row']} attempt(s) in a row, last at "
                     f"{format_time(failure['at'])}: {failure['error']}; next try at "
                     f"{format_time(status['retry_at'])}")
    return lines


@backup_group.command("restore")
@click.option("--at", "at", metavar="TIME",
              help="The newest backup taken at or before TIME ('2026-11-23 10:35', or '2h' ago).")
@click.option("--object", "key", metavar="KEY", help="This backup (a key from `backup list`).")
@click.option("--to", "to", type=click.Path(dir_okay=False, path_type=Path),
              help="Restore into this SQLite file instead of the configured database.")
@json_option
@click.pass_context
def restore_command(ctx: click.Context, at: str | None, key: str | None, to: Path | None,
                    as_json: bool) -> None:
    """Restore the newest backup (or --at, --object) over the database; the daemon must be
    stopped. The replaced database is kept beside it."""
    from taskherd.ops.backups import parse_moment, restore_backup

    config = get_config(ctx)
    moment = now()
    with _refusals():
        when = None if at is None else parse_moment(at, config.daemon.timezone, moment)
        restored = restore_backup(config, moment, at=when, key=key, to=to)
    if as_json:
        print_json(restored.to_dict())
        return
    click.echo(f"restored {restored.key} into {restored.database}: {restored.tasks} task(s), "
               f"{restored.migrations_applied} migration(s) applied")
    if restored.replaced:
        click.echo(f"the database it replaced is kept as {restored.replaced}")


@backup_group.command("verify")
@click.option("--object", "key", metavar="KEY", help="This backup instead of the newest.")
@json_option
@click.pass_context
def verify_command(ctx: click.Context, key: str | None, as_json: bool) -> None:
    """Restore the newest backup to a temporary place and check it (checksum, integrity,
    schema); the live database is not touched."""
    from taskherd.ops.backups import verify_backup

    with _refusals():
        verified = verify_backup(get_config(ctx), key)
    if as_json:
        print_json(verified.to_dict())
        return
    click.echo(f"{verified.key} is good: checksum and integrity check pass, "
               f"{verified.tasks} task(s)")


@backup_group.command("copy")
@click.argument("destination", required=False, type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def copy_command(ctx: click.Context, destination: Path | None, as_json: bool) -> None:
    """Copy the database to DESTINATION (default: backups/ in the data dir, named by time).

    The copy is consistent even while the daemon writes, passes an integrity check before it
    is put in place, and is readable by its owner only.
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
