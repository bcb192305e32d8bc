"""The backup service: a snapshot every `snapshot_every`, a rollup every `rollup_every`, each
uploaded to the `[backup] target` and pruned by count and age.

Run in a worker thread (the runner's `in_thread`): the snapshot reads the whole database and
the upload waits on the network, and the event loop must keep dispatching meanwhile. A failed
attempt deletes nothing (pruning follows a good upload only), is recorded for `status` and
`doctor`, and is tried again after a backoff that doubles up to `retry_cap`.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from taskherd.backups.archive import ROLLUPS, SNAPSHOTS, backups_in, expired
from taskherd.backups.state import read_state, write_state
from taskherd.backups.targets import BackupError, Progress, Target, open_target
from taskherd.backups.worker import run_worker, snapshot_and_store
from taskherd.config import make_private_dir
from taskherd.model.settings import BackupConfig, Config
from taskherd.store import Store

log = logging.getLogger("taskherd.backups")


@dataclass(frozen=True)
class BackupSettings:
    retry_first: float = 30.0  # seconds before the first retry of a failed backup
    retry_cap: float = 15 * 60.0  # the backoff doubles up to this
    isolated: bool = True  # in a worker process of its own, at a lower CPU priority


class Stopping(Exception):
    """The daemon stops: the upload under way is abandoned (the object never appears)."""


class Backups:
    def __init__(self, config: Config, store: Store, settings: BackupSettings = BackupSettings(),
                 after_snapshot: Callable[[], None] | None = None):
        self.config = config  # replaced on reload: the next pass reads the new [backup]
        self.store = store  # the daemon's; a snapshot opens connections of its own
        self.settings = settings
        self.after_snapshot = after_snapshot  # the daemon asks for a WAL checkpoint here
        self.state = read_state(config.daemon.data_dir)
        self._target: tuple[BackupConfig, Target] | None = None
        self._stopping = threading.Event()
        self._worker: subprocess.Popen | None = None

    def stop(self) -> None:
        """Abandon a backup under way (its worker killed, or at the upload's next chunk):
        a stop must not wait for it. What it had sent never becomes an object."""
        self._stopping.set()
        worker = self._worker
        if worker is not None and worker.poll() is None:
            worker.kill()

    def next_wake(self, now: float) -> float | None:
        if self.config.backup.target is None:
            return None  # the runner's max_sleep: a reload may add a target
        return min(self._due_at(kind) for kind in (SNAPSHOTS, ROLLUPS))

    def run_once(self, now: float) -> dict[str, int]:
        if self.config.backup.target is None:
            return {}
        due = [kind for kind in (SNAPSHOTS, ROLLUPS) if self._due_at(kind) <= now]
        return self.take(due, now) if due else {}

    def take(self, kinds: list[str], now: float,
             progress: Progress | None = None) -> dict[str, int]:
        """One snapshot of the database, stored as each of `kinds`, then pruning; the counts.

        In a worker process (`settings.isolated`), unless `progress` asks to follow the
        upload from here (the same steps, in this process)."""
        data_dir = make_private_dir(self.config.daemon.data_dir)
        database, settings = self.config.daemon.database, self.config.backup
        counts = {kind: 0 for kind in kinds} | {"upload_failures": 0, "pruned": 0}

        def moved(count: int) -> None:
            if self._stopping.is_set():
                raise Stopping
            if progress is not None:
                progress(count)

        try:
            # Beside the database's data, not in /tmp (often a small RAM disk): it holds a
            # whole copy of the database for the time of the upload.
            with tempfile.TemporaryDirectory(prefix=".backup-", dir=data_dir) as work:
                if self.settings.isolated and progress is None:
                    stored = run_worker(database, settings, kinds, now, Path(work),
                                        started=self._worker_started)
                else:
                    stored = snapshot_and_store(database, settings, kinds, now, Path(work),
                                                moved)
            if self.after_snapshot is not None:
                self.after_snapshot()
            for record in stored:
                counts[record["kind"]] += 1
                self._stored(record)
            counts["pruned"] = self.prune(now)
        except Stopping:
            log.info("backup abandoned: the daemon stops; the next start takes one")
            return counts
        except (BackupError, OSError) as error:
            if self._stopping.is_set():
                return counts
            self._failed(error, now)
            counts["upload_failures"] = 1
        finally:
            self._worker = None
        write_state(data_dir, self.state)
        return counts

    def _worker_started(self, worker: subprocess.Popen) -> None:
        self._worker = worker
        if self._stopping.is_set():
            worker.kill()

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

    def _stored(self, record: dict) -> None:
        kind, took = record.pop("kind"), record["seconds"]
        if kind == SNAPSHOTS:
            self.state.last_snapshot = record
        else:
            self.state.last_rollup = record
        self.state.uploaded += 1
        self.state.failures_in_a_row = 0
        self.state.retry_at = None
        log.info("backup %s stored in %s: %.1f MB of a %.1f MB database (snapshot and "
                 "compression %.1fs, upload %.1fs)", record["key"], record["target"],
                 record["bytes"] / 1e6, record["database_bytes"] / 1e6, took["snapshot"],
                 took["upload"])

    def _failed(self, error: Exception, now: float) -> None:
        self.state.failures_in_a_row += 1
        wait = min(self.settings.retry_cap,
                   self.settings.retry_first * 2 ** (self.state.failures_in_a_row - 1))
        self.state.retry_at = now + wait
        self.state.last_failure = {"at": now, "error": str(error)}
        log.error("backup failed (%s in a row), retrying in %.0fs; older backups are kept: %s",
                  self.state.failures_in_a_row, wait, error)
