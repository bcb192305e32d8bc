"""The backup service: a snapshot every `snapshot_every`, a rollup every `rollup_every`, each
uploaded to the `[backup] target` and pruned by count and age.

Run in a worker thread (the runner's `in_thread`): the snapshot reads the whole database and
the upload waits on the network, and the event loop must keep dispatching meanwhile. A failed
attempt deletes nothing (pruning follows a good upload only), is recorded for `status` and
`doctor`, and is tried again after a backoff that doubles up to `retry_cap`.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from taskherd.backups.archive import (
    ROLLUPS,
    SNAPSHOTS,
    Archive,
    backup_key,
    backups_in,
    expired,
    make_archive,
)
from taskherd.backups.state import read_state, write_state
from taskherd.backups.targets import BackupError, Progress, Target, open_target
from taskherd.config import BackupConfig, Config, make_private_dir
from taskherd.store import Store

log = logging.getLogger("taskherd.backups")


@dataclass(frozen=True)
class BackupSettings:
    retry_first: float = 30.0  # seconds before the first retry of a failed backup
    retry_cap: float = 15 * 60.0  # the backoff doubles up to this


class Stopping(Exception):
    """The daemon stops: the upload under way is abandoned (the object never appears)."""


class Backups:
    def __init__(self, config: Config, store: Store, settings: BackupSettings = BackupSettings(),
                 after_snapshot: Callable[[], None] | None = None):
        self.config = config  # replaced on reload: the next pass reads the new [backup]
        self.store = store
        self.settings = settings
        self.after_snapshot = after_snapshot  # the daemon asks for a WAL checkpoint here
        self.state = read_state(config.daemon.data_dir)
        self._target: tuple[BackupConfig, Target] | None = None
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Abandon an upload under way at its next chunk: a stop must not wait for it."""
        self._stopping.set()

    def next_wake(self, now: float) -> float | None:
        if self.config.backup.target is None:
            return None  # the runner's max_sleep: a reload may add a target
        return min(self._due_at(kind) for kind in (SNAPSHOTS, ROLLUPS))

    def run_once(self, now: float) -> dict[str, int]:
        if self.config.backup.target is None:
            return {}
        due = [kind for kind in (SNAPSHOTS, ROLLUPS) if self._due_at(kind) <= now]
        return self.take(due, now) if due else {}

    def take(self, kinds: list[str], now: float, progress: Progress | None = None) -> dict[str, int]:
        """One snapshot of the database, stored as each of `kinds`, then pruning; the counts."""
        settings = self.config.backup
        data_dir = make_private_dir(self.config.daemon.data_dir)
        counts = {kind: 0 for kind in kinds} | {"upload_failures": 0, "pruned": 0}

        def moved(count: int) -> None:
            if self._stopping.is_set():
                raise Stopping
            if progress is not None:
                progress(count)

        try:
            target = self.target()
            # Beside the database's data, not in /tmp (often a small RAM disk): it holds a
            # whole copy of the database for the time of the upload.
            with tempfile.TemporaryDirectory(prefix=".backup-", dir=data_dir) as work:
                archive = make_archive(self.store, self.config.daemon.database, Path(work),
                                       settings.compression_level)
                if self.after_snapshot is not None:
                    self.after_snapshot()
                for kind in kinds:
                    key = backup_key(kind, now, archive.suffix)
                    target.put(key, archive.path, archive.sha256, moved)
                    self._stored(kind, key, archive, now)
                    counts[kind] += 1
            counts["pruned"] = self.prune(now)
        except Stopping:
            log.info("backup abandoned: the daemon stops; the next start takes one")
            return counts
        except (BackupError, OSError) as error:
            self._failed(error, now)
            counts["upload_failures"] = 1
        write_state(data_dir, self.state)
        return counts

    def prune(self, now: float) -> int:
        """Delete the backups retention lets go; only called after a good upload."""
        settings = self.config.backup
        backups = backups_in(self.target().list())
        going = (expired(backups, SNAPSHOTS, settings.snapshot_keep_for,
                         settings.snapshot_keep_count, now)
                 + expired(backups, ROLLUPS, settings.rollup_keep_for,
                           settings.rollup_keep_count, now))
        for backup in going:
            self.target().delete(backup.key)
        self.state.pruned += len(going)
        return len(going)

    def target(self) -> Target:
        settings = self.config.backup
        if self._target is None or self._target[0] != settings:
            self._target = (settings, open_target(settings))
        return self._target[1]

    def _due_at(self, kind: str) -> float:
        settings = self.config.backup
        last = self.state.last_snapshot if kind == SNAPSHOTS else self.state.last_rollup
        every = settings.snapshot_every if kind == SNAPSHOTS else settings.rollup_every
        due = float("-inf") if last is None else last["taken_at"] + every
        if self.state.retry_at is not None:
            due = max(due, self.state.retry_at)
        return due

    def _stored(self, kind: str, key: str, archive: Archive, now: float) -> None:
        record = {"key": key, "taken_at": now, "bytes": archive.size,
                  "database_bytes": archive.database_size, "target": self.target().name}
        if kind == SNAPSHOTS:
            self.state.last_snapshot = record
        else:
            self.state.last_rollup = record
        self.state.uploaded += 1
        self.state.failures_in_a_row = 0
        self.state.retry_at = None
        log.info("backup %s stored in %s (%.1f MB)", key, self.target().name, archive.size / 1e6)

    def _failed(self, error: Exception, now: float) -> None:
        self.state.failures_in_a_row += 1
        wait = min(self.settings.retry_cap,
                   self.settings.retry_first * 2 ** (self.state.failures_in_a_row - 1))
        self.state.retry_at = now + wait
        self.state.last_failure = {"at": now, "error": str(error)}
        log.error("backup failed (%s in a row), retrying in %.0fs; older backups are kept: %s",
                  self.state.failures_in_a_row, wait, error)
