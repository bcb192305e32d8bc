"""Backup operations: take one now, list, status, restore, verify.

A restore replaces the database under every door, so it refuses while a daemon of this host
holds the database (naming its pid), and changes nothing until the backup has passed every
check. `BackupError` is a refusal worded for the person; `BadInput` a bad argument.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from taskherd.backups.archive import KINDS, Backup, backups_in
from taskherd.backups.restore import (
    Restored,
    choose,
    daemons_using,
    restore_postgres,
    restore_sqlite,
    verify_postgres,
    verify_sqlite,
)
from taskherd.backups.state import read_state
from taskherd.backups.targets import BackupError, open_target
from taskherd.config import Config
from taskherd.durations import parse_duration
from taskherd.ops import BadInput
from taskherd.store import Store
from taskherd.store.urls import is_postgres_url

__all__ = ["BackupError", "backup_status", "list_backups", "parse_moment", "restore_backup",
           "take_backup", "verify_backup"]


def take_backup(config: Config, store: Store, kinds: list[str], now: float) -> dict[str, Any]:
    """A snapshot now, stored as each of `kinds` (snapshots, rollups), then pruning."""
    from taskherd.services.backups import Backups

    open_target(config.backup)  # no target: say so before copying anything
    service = Backups(config, store)
    counts = service.take(kinds, now)
    if counts["upload_failures"]:
        raise BackupError(f"backup failed: {service.state.last_failure['error']}")
    stored = [service.state.last_snapshot if kind == "snapshots" else service.state.last_rollup
              for kind in kinds]
    return {"stored": stored, "pruned": counts["pruned"]}


def list_backups(config: Config) -> list[Backup]:
    """Every backup in the target, oldest first."""
    return backups_in(open_target(config.backup).list())


def backup_status(config: Config) -> dict[str, Any]:
    """What the service last did (from the data dir) and what the target holds now."""
    state = read_state(config.daemon.data_dir)
    status: dict[str, Any] = {"target": config.backup.target, **state.to_dict()}
    if config.backup.target is None:
        return status
    try:
        backups = list_backups(config)
    except BackupError as error:
        status["target_error"] = str(error)
        return status
    for kind in KINDS:
        mine = [backup for backup in backups if backup.kind == kind]
        status[kind] = {"count": len(mine), "bytes": sum(b.size for b in mine),
                        "latest": mine[-1].to_dict() if mine else None}
    return status


def restore_backup(config: Config, now: float, *, at: float | None = None,
                   key: str | None = None, to: Path | None = None) -> Restored:
    """Restore a backup (the newest, the newest at or before `at`, or `key`) over the
    configured database, or into the new file `to`."""
    if at is not None and key is not None:
        raise BadInput("give --at or --object, not both")
    database = config.daemon.database
    if to is None or str(to.resolve()) == str(Path(database).resolve()):
        pids = daemons_using(database, config.daemon.data_dir)
        if pids:
            running = ", ".join(f"pid {pid}" if pid else "pid unknown" for pid in pids)
            raise BackupError(f"a taskherd daemon uses this database ({running}): stop it "
                              "first (`taskherd stop`), then restore")
    target = open_target(config.backup)
    backup = choose(backups_in(target.list()), at, key)
    if to is not None:
        if not to.parent.is_dir():
            raise BadInput(f"--to {to}: {to.parent} is not a folder")
        return restore_sqlite(target, backup.key, to, now)
    if is_postgres_url(database):
        return restore_postgres(target, backup.key, database, config.daemon.data_dir, now)
    return restore_sqlite(target, backup.key, Path(database), now)


def verify_backup(config: Config, key: str | None = None) -> Restored:
    """Restore the newest backup (or `key`) to a temporary place and check it there."""
    target = open_target(config.backup)
    backup = choose(backups_in(target.list()), None, key)
    if backup.key.endswith(".dump"):
        return verify_postgres(target, backup.key)
    return verify_sqlite(target, backup.key)


def parse_moment(text: str, timezone: str | None, now: float) -> float:
    """`--at`: a time ('2026-11-23 10:35', in the fleet's zone unless it names one) or a
    duration before now ('2h')."""
    try:
        return now - parse_duration(text, field="--at")
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(f"--at {text!r}: expected a time like '2026-11-23 10:35' or a "
                       "duration before now like '2h'") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(timezone)) if timezone else moment.astimezone()
    return moment.timestamp()
