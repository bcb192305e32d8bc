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


def verbose_option(command: Any) -> Any:
    return click.option("--verbose", "-v", is_flag=True,
                        help="On failure, print everything the check or tool said.")(command)


@contextmanager
def _refusals(verbose: bool = False) -> Iterator[None]:
    """A backup that cannot be done exits 1 with its reason, a line or two; what a tool or
    an integrity check said at length (a hundred lines) only with --verbose. A bad argument
    exits 2."""
    from taskherd import ops
    from taskherd.backups.targets import BackupError

    try:
        yield
    except BackupError as error:
        raise Refused(_with_details(error, verbose)) from error
    except ops.BadInput as error:
        raise BadInput(str(error)) from error


def _with_details(error: Any, verbose: bool, said: str | None = None) -> str:
    said = str(error) if said is None else said
    if not error.details:
        return said
    if verbose:
        return f"{said}\n{error.details}"
    return f"{said}\n(--verbose prints the details)"


def _passed_over(verbose: bool) -> Any:
    """A restore's or a verify's line for each damaged backup it passes over, as found."""
    def tell(error: Any) -> None:
        said = f"warning: {error}; passed over for the next older backup"
        click.echo(_with_details(error, verbose, said), err=True)
    return tell


def _take(ctx: click.Context, kind: str, as_json: bool, verbose: bool) -> None:
    from taskherd.ops.backups import take_backup

    config = get_config(ctx)
    if config.backup.target is None:
        raise BadInput("no [backup] target is configured: set it to a folder or to "
                       "s3://bucket/prefix (or use `taskherd backup copy PATH`)")
    with store_for(ctx, writes=False) as store, _refusals(verbose):
        result = take_backup(config, store, [kind], now())
    if as_json:
        print_json(result)
        return
    for stored in result["stored"]:
        click.echo(f"stored {stored['key']} in {stored['target']} "
                   f"({stored['bytes'] / 1e6:.1f} MB, "
                   f"database {stored['database_bytes'] / 1e6:.1f} MB)")
    if result["pruned"]:
        click.echo(f"pruned {result['pruned']} backup(s) past retention")


@backup_group.command("snapshot")
@json_option
@verbose_option
@click.pass_context
def snapshot_command(ctx: click.Context, as_json: bool, verbose: bool) -> None:
    """Take a snapshot now and store it in the target (snapshots/DAY/HH-MM-SS.ffffff-ID)."""
    _take(ctx, "snapshots", as_json, verbose)


@backup_group.command("rollup")
@json_option
@verbose_option
@click.pass_context
def rollup_command(ctx: click.Context, as_json: bool, verbose: bool) -> None:
    """Take a snapshot now and store it as a rollup (rollups/DAY/HH-MM-SS.ffffff-ID)."""
    _take(ctx, "rollups", as_json, verbose)


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
    """`backup status` in words: the target's latest of each kind, not the one recorded."""
    if status["target"] is None:
        return ["backups: none configured ([backup] target)"]
    lines = [f"backups to {status['target']}"]
    for kind in ("snapshots", "rollups"):
        lines += _kind_lines(kind, status.get(kind), status[f"last_{kind[:-1]}"])
    if status.get("target_error"):
        lines.append(f"  target unreachable: {status['target_error']}")
    if status["failures_in_a_row"]:
        failure = status["last_failure"]
        lines.append(f"  FAILING: {status['failures_in_a_row']} attempt(s) in a row, last at "
                     f"{format_time(failure['at'])}: {failure['error']}; next try at "
                     f"{format_time(status['retry_at'])}")
    return lines


def _kind_lines(kind: str, held: dict[str, Any] | None,
                last: dict[str, Any] | None) -> list[str]:
    """A kind's latest as the target holds it; the daemon's record only when the target
    could not be read, and said to be that."""
    if held is None:  # the target could not be read
        recorded = (f"latest recorded {last['key']} at {format_time(last['taken_at'])} "
                    "(not checked: the target could not be read)") if last else "none yet"
        return [f"  {kind}: {recorded}"]
    latest = held["latest"]
    shown = (f"latest {latest['key']} at {format_time(latest['taken_at'])}; {held['count']} "
             f"kept, {held['bytes'] / 1e6:.1f} MB" if latest else "none in the target")
    lines = [f"  {kind}: {shown}"]
    if held.get("recorded_gone"):
        lines.append(f"  {kind}: the latest recorded, {held['recorded_gone']}, is no longer "
                     "in the target")
    return lines


@backup_group.command("restore")
@click.option("--at", "at", metavar="TIME",
              help="The newest backup taken at or before TIME ('2026-11-23 10:35', or '2h' ago).")
@click.option("--object", "key", metavar="KEY", help="This backup (a key from `backup list`).")
@click.option("--to", "to", type=click.Path(dir_okay=False, path_type=Path),
              help="Restore into this SQLite file instead of the configured database.")
@json_option
@verbose_option
@click.pass_context
def restore_command(ctx: click.Context, at: str | None, key: str | None, to: Path | None,
                    as_json: bool, verbose: bool) -> None:
    """Restore the newest good backup (or --at, --object) over the database; the daemon must
    be stopped. A damaged backup is named and passed over for the next older (not one named
    by --object). The replaced database is kept beside it."""
    from taskherd.ops.backups import parse_moment, restore_backup

    config = get_config(ctx)
    moment = now()
    with _refusals(verbose):
        when = None if at is None else parse_moment(at, config.daemon.timezone, moment)
        restored = restore_backup(config, moment, at=when, key=key, to=to,
                                  damaged=_passed_over(verbose))
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
@verbose_option
@click.pass_context
def verify_command(ctx: click.Context, key: str | None, as_json: bool, verbose: bool) -> None:
    """Restore the newest backup to a temporary place and check it (checksum, integrity,
    schema); the live database is not touched. A damaged one is named and the next older
    checked, down to the newest good one."""
    from taskherd.ops.backups import verify_backup

    with _refusals(verbose):
        verified = verify_backup(get_config(ctx), key, damaged=_passed_over(verbose))
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
    with store_for(ctx, writes=False) as store:
        store.backup(destination)
    size = destination.stat().st_size
    if as_json:
        print_json({"path": str(destination), "bytes": size})
    else:
        click.echo(f"backed up to {destination} ({size / 1e6:.1f} MB)")
