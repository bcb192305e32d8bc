"""Restore: a backup from the target back into a database, checked before it replaces anything.

The backup is downloaded to a temporary file beside the database, its SHA-256 compared with
the one recorded when it was stored, unpacked, put through `PRAGMA integrity_check`, brought to
this version's schema (pending migrations), and only then swapped in with one rename. The
database it replaces is kept beside it (`taskherd.db.replaced-YYYYMMDD-HHMMSS`).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from taskherd.backups.archive import PG_SUFFIX, Backup, pg_command, suffix_of, unpack
from taskherd.backups.targets import BackupError, DamagedBackup, Target, file_sha256
from taskherd.config import make_private_dir
from taskherd.store.urls import is_postgres_url


@dataclass(frozen=True)
class Restored:
    key: str
    database: str
    replaced: str | None  # where the database it replaced was kept, if there was one
    migrations_applied: int
    tasks: int
    # Newer backups passed over as damaged, newest first: {"key": …, "error": …}.
    damaged: tuple[dict[str, str], ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {**self.__dict__, "damaged": list(self.damaged)}


def candidates(backups: list[Backup], at: float | None = None,
               key: str | None = None) -> list[Backup]:
    """The backup named by `key`; else those taken at or before `at` (or all), newest first
    (of a snapshot and a rollup of one moment, the snapshot), for a fallback to go down."""
    if key is not None:
        for backup in backups:
            if backup.key == key:
                return [backup]
        raise BackupError(f"no backup {key!r} in the target (`taskherd backup list` shows them)")
    found = [b for b in backups if at is None or b.taken_at <= at]
    if not found:
        moment = None if at is None else datetime.fromtimestamp(at, UTC)
        when = "" if moment is None else f" taken at or before {moment:%Y-%m-%d %H:%M} UTC"
        raise BackupError(f"no backup{when} in the target")
    return sorted(found, key=lambda b: (b.taken_at, b.kind == "snapshots", b.key), reverse=True)


def daemons_using(database: str, data_dir: Path) -> list[int]:
    """The pids of the daemons on this host holding a node lock of `database`."""
    pattern = (str(data_dir / "node-*.lock") if is_postgres_url(database)
               else glob.escape(database) + ".*.lock")
    pids = []
    for path in glob.glob(pattern):
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: a daemon runs
            try:
                pids.append(int(json.loads(os.read(fd, 200) or b"{}").get("pid")))
            except (ValueError, TypeError):
                pids.append(0)
        finally:
            os.close(fd)
    return pids


def download_checked(target: Target, key: str, destination: Path) -> None:
    """Download `key` to `destination` and refuse it unless its bytes hash as recorded."""
    recorded = target.get(key, destination)
    actual = file_sha256(destination)
    if actual != recorded:
        destination.unlink(missing_ok=True)
        raise DamagedBackup(key, f"checksum mismatch (recorded sha256 {recorded[:16]}…, "
                                 f"downloaded {actual[:16]}…): its bytes were altered at rest "
                                 "or in transit")


def restore_sqlite(target: Target, key: str, database: Path, now: float) -> Restored:
    """Replace the SQLite file `database` (or create it) with the backup `key`."""
    suffix = suffix_of(key)
    if suffix == PG_SUFFIX:
        raise BackupError(f"{key} is a PostgreSQL dump; this database is a SQLite file")
    make_private_dir(database.parent)
    # Beside the database: the final rename stays on one file system, so it is atomic.
    with tempfile.TemporaryDirectory(prefix=".restore-", dir=database.parent) as work:
        archive, restored = Path(work) / f"download{suffix}", Path(work) / "restored.db"
        download_checked(target, key, archive)
        _unpack(key, archive, suffix, restored)
        archive.unlink()
        os.chmod(restored, 0o600)
        _check_integrity(key, restored)
        applied, tasks = _migrate(key, restored)
        replaced = _swap_in(restored, database, now)
    return Restored(key, str(database), None if replaced is None else str(replaced), applied,
                    tasks)


def restore_postgres(target: Target, key: str, url: str, keep_dir: Path,
                     now: float) -> Restored:
    """Replace the PostgreSQL database's contents with the dump `key`, in one transaction;
    the contents it replaces are dumped to `keep_dir` first."""
    from taskherd.backups.archive import make_archive

    if suffix_of(key) != PG_SUFFIX:
        raise BackupError(f"{key} is a SQLite backup; this database is PostgreSQL")
    make_private_dir(keep_dir)
    with tempfile.TemporaryDirectory(prefix=".restore-", dir=keep_dir) as work:
        dump = Path(work) / "download.dump"
        download_checked(target, key, dump)
        kept = make_archive(url, Path(work), 0)
        replaced = keep_dir / f"replaced-{_stamp(now)}.dump"
        shutil.move(kept.path, replaced)
        argv, env = pg_command("pg_restore", url)
        restore = [*argv, "--clean", "--if-exists", "--no-owner", "--single-transaction",
                   str(dump)]
        run = subprocess.run(restore, check=False, env=env, capture_output=True, text=True,
                             errors="replace", timeout=6 * 3600)
        if run.returncode != 0:
            raise BackupError(f"pg_restore failed ({run.returncode}), the database is as it was: "
                              f"{first_line(run.stderr)}", run.stderr.strip() or None)
    from taskherd.store import open_store

    with open_store(url) as store:  # applies pending migrations
        tasks = sum(count.count for count in store.counts())
    return Restored(key, url, str(replaced), 0, tasks)


def verify_sqlite(target: Target, key: str) -> Restored:
    """Restore `key` into a temporary folder and check it; the live database is not touched."""
    with tempfile.TemporaryDirectory(prefix="taskherd-verify-") as work:
        return restore_sqlite(target, key, Path(work) / "verify.db", 0.0)


def verify_postgres(target: Target, key: str) -> Restored:
    """Download `key`, check its checksum, and read its table of contents with pg_restore."""
    with tempfile.TemporaryDirectory(prefix="taskherd-verify-") as work:
        dump = Path(work) / "verify.dump"
        download_checked(target, key, dump)
        from taskherd.backups.archive import pg_tool

        run = subprocess.run([pg_tool("pg_restore"), "--list", str(dump)], check=False,
                             capture_output=True, text=True, errors="replace", timeout=600)
        if run.returncode != 0:
            raise DamagedBackup(key, f"pg_restore cannot read it: {first_line(run.stderr)}",
                                run.stderr.strip() or None)
        tables = sum(" TABLE DATA " in line for line in run.stdout.splitlines())
    return Restored(key, "(verified, not restored)", None, 0, tables)


def first_line(output: str) -> str:
    """The first line of a tool's output that says something (all of it goes in details)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[0] if lines else "(no output)"


def _unpack(key: str, archive: Path, suffix: str, destination: Path) -> None:
    try:
        unpack(archive, suffix, destination)
    except BackupError as error:
        raise DamagedBackup(key, str(error)) from error


def _check_integrity(key: str, path: Path) -> None:
    """Refuse a file that is not a whole taskherd database. A damaged one fails PRAGMA
    integrity_check with a line per problem (a hundred is its cap): the message says how many
    and the first, the details hold them all."""
    from taskherd.store import StoreError
    from taskherd.store.sqlite import check_file

    try:
        check_file(path)
    except StoreError as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        problems = [line for line in lines[1:] if not line.startswith("***")]
        if len(lines) <= 1:
            raise DamagedBackup(key, str(error)) from error
        first = problems[0] if problems else lines[-1]
        counted = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
        raise DamagedBackup(key, f"it fails PRAGMA integrity_check ({counted}; the first: "
                                 f"{first})", str(error)) from error


def _migrate(key: str, path: Path) -> tuple[int, int]:
    """Bring the restored file to this version's schema; (migrations applied, tasks)."""
    from taskherd.store import StoreError
    from taskherd.store.sqlite import SQLiteStore, migrations_applied

    before = migrations_applied(path)
    try:
        with SQLiteStore(path) as store:
            tasks = sum(count.count for count in store.counts())
    except StoreError as error:
        raise DamagedBackup(key, "its schema cannot be brought up to date: "
                                 f"{first_line(str(error))}", str(error)) from error
    return migrations_applied(path) - before, tasks


def _swap_in(restored: Path, database: Path, now: float) -> Path | None:
    """Put `restored` where `database` is, in one rename; keep what was there."""
    kept = database.with_name(f"{database.name}.replaced-{_stamp(now)}")
    number = 1
    while kept.exists() or kept.with_name(kept.name + "-wal").exists():  # two in one second
        number += 1
        kept = database.with_name(f"{database.name}.replaced-{_stamp(now)}-{number}")
    wal, shm = (database.with_name(database.name + end) for end in ("-wal", "-shm"))
    replaced = None
    if database.exists():
        # What the old file's WAL holds belongs in the copy kept; fold it in if it can be.
        from taskherd.store.sqlite import fold_wal

        fold_wal(database)
        os.link(database, kept)
        replaced = kept
    # A WAL left beside the path would be replayed into the restored file as if it were its
    # own (after a crash, or with the database file deleted): moved aside, never applied.
    if wal.exists() and wal.stat().st_size > 0:
        os.replace(wal, kept.with_name(kept.name + "-wal"))
        replaced = replaced or kept.with_name(kept.name + "-wal")
    wal.unlink(missing_ok=True)
    shm.unlink(missing_ok=True)
    os.replace(restored, database)
    _fsync_dir(database.parent)
    return replaced


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y%m%d-%H%M%S")
