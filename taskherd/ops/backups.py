"""Backup operations: take one now, list, status, restore, verify.

A restore replaces the database under every door, so it refuses while a daemon of this host
holds the database (naming its pid), and changes nothing until the backup has passed every
check. `BackupError` is a refusal worded for the person; `BadInput` a bad argument.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from taskherd.backups.archive import KINDS, Backup, backups_in
from taskherd.backups.restore import (
    Restored,
    candidates,
    daemons_using,
    restore_postgres,
    restore_sqlite,
    verify_postgres,
    verify_sqlite,
)
from taskherd.backups.state import read_state
from taskherd.backups.targets import BackupError, DamagedBackup, Target, open_target
from taskherd.model.settings import Config
from taskherd.ops import BadInput
from taskherd.policy.durations import parse_duration
from taskherd.store import Store
from taskherd.store.urls import is_postgres_url

__all__ = ["BackupError", "backup_status", "list_backups", "parse_moment", "restore_backup",
           "take_backup", "verify_backup"]


def take_backup(config: Config, store: Store, kinds: list[str], now: float) -> dict[str, Any]:
    """A snapshot now, stored as each of `kinds` (snapshots, rollups), then pruning."""
    from taskherd.backups.service import Backups

    open_target(config.backup)  # no target: say so before copying anything
    service = Backups(config, store)
    counts = service.take(kinds, now)
    if counts["upload_failures"]:
        failure = service.state.last_failure or {}
        raise BackupError(f"backup failed: {failure.get('error')}")
    stored = [service.state.last_snapshot if kind == "snapshots" else service.state.last_rollup
              for kind in kinds]
    return {"stored": stored, "pruned": counts["pruned"]}


def list_backups(config: Config) -> list[Backup]:
    """Every backup in the target, oldest first."""
    return backups_in(open_target(config.backup).list())


def backup_status(config: Config) -> dict[str, Any]:
    """What the service last did (from the data dir) and what the target holds now: each
    kind's latest is the target's, and a recorded latest the target no longer holds (the
    bucket emptied, the object deleted) is named as gone, never shown as the latest."""
    state = read_state(config.daemon.data_dir)
    status: dict[str, Any] = {"target": config.backup.target, **state.to_dict()}
    if config.backup.target is None:
        return status
    try:
        backups = list_backups(config)
    except BackupError as error:
        status["target_error"] = str(error)
        return status
    keys = {backup.key for backup in backups}
    for kind in KINDS:
        mine = [backup for backup in backups if backup.kind == kind]
        recorded = status[f"last_{kind[:-1]}"]
        status[kind] = {"count": len(mine), "bytes": sum(b.size for b in mine),
                        "latest": mine[-1].to_dict() if mine else None,
                        "recorded_gone": (recorded["key"] if recorded and
                                          recorded["key"] not in keys else None)}
    return status


Damaged = Callable[[DamagedBackup], None]


def restore_backup(config: Config, now: float, *, at: float | None = None,
                   key: str | None = None, to: Path | None = None,
                   damaged: Damaged | None = None) -> Restored:
    """Restore a backup (the newest, the newest at or before `at`, or `key`) over the
    configured database, or into the new file `to`. Without `key`, a damaged backup is
    passed over for the next older one (`damaged` is told of each, as it is found); nothing
    is changed until one passes every check."""
    if at is not None and key is not None:
        raise BadInput("give --at or --object, not both")
    database = config.daemon.database
    if to is None or str(to.resolve()) == str(Path(database).resolve()):
        pids = daemons_using(database, config.daemon.data_dir)
        if pids:
            running = ", ".join(f"pid {pid}" if pid else "pid unknown" for pid in pids)
            raise BackupError(f"a taskherd daemon uses this database ({running}): stop it "
                              "first (`taskherd stop`), then restore")
    if to is not None and not to.parent.is_dir():
        raise BadInput(f"--to {to}: {to.parent} is not a folder")
    target = open_target(config.backup)

    def restore(found: str) -> Restored:
        if to is not None:
            return restore_sqlite(target, found, to, now)
        if is_postgres_url(database):
            return restore_postgres(target, found, database, config.daemon.data_dir, now)
        return restore_sqlite(target, found, Path(database), now)

    return _newest_good(target, at, key, restore, damaged)


def verify_backup(config: Config, key: str | None = None,
                  damaged: Damaged | None = None) -> Restored:
    """Restore the newest backup (or `key`) to a temporary place and check it there; without
    `key`, a damaged one is passed over for the next older, as `restore_backup` does."""
    target = open_target(config.backup)

    def verify(found: str) -> Restored:
        if found.endswith(".dump"):
            return verify_postgres(target, found)
        return verify_sqlite(target, found)

    return _newest_good(target, None, key, verify, damaged)


def _newest_good(target: Target, at: float | None, key: str | None,
                 attempt: Callable[[str], Restored], damaged: Damaged | None) -> Restored:
    """`attempt` on the backup `key`, or on the newest (at or before `at`) that is not
    damaged. A fault of the target (unreachable, refused) ends the search: only a backup
    found damaged is passed over."""
    passed_over: list[DamagedBackup] = []
    for backup in candidates(backups_in(target.list()), at, key):
        try:
            restored = attempt(backup.key)
        except DamagedBackup as error:
            if key is not None:
                raise
            passed_over.append(error)
            if damaged is not None:
                damaged(error)
            continue
        return dataclasses.replace(restored, damaged=tuple(
            {"key": error.key, "error": str(error)} for error in passed_over))
    newest = passed_over[0]
    raise BackupError(f"no good backup in the target{'' if at is None else ' at or before --at'}"
                      f": the {len(passed_over)} there are damaged; the newest, {newest}",
                      newest.details)


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
