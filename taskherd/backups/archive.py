"""A backup as a file: a consistent snapshot of the database, compressed, with its SHA-256;
its name in the target; and which backups retention lets go.

SQLite: the online backup API copies the pages inside one read transaction (the daemon keeps
writing: WAL readers do not block writers), then gzip streams the copy in 1 MiB chunks, hashing
what it writes. PostgreSQL: `pg_dump` in its custom format, which compresses by itself.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit, urlunsplit

from taskherd.backups.targets import CHUNK, BackupError, StoredObject, file_sha256
from taskherd.store import StoreError

SNAPSHOTS, ROLLUPS = "snapshots", "rollups"
KINDS = (SNAPSHOTS, ROLLUPS)
SQLITE_SUFFIXES = (".db.gz", ".db")
PG_SUFFIX = ".dump"
# KIND/YYYY-MM-DD/HH-MM-SS.ffffff-NONCE.SUFFIX; and the names of older versions, which had
# one key a minute for snapshots (HH-MM) and an hour for rollups (HH), still listed, restored
# and pruned.
_KEY = re.compile(r"(snapshots|rollups)/(\d{4}-\d{2}-\d{2})/"
                  r"(\d{2})(?:-(\d{2})(?:-(\d{2})\.(\d{6})-[0-9a-f]{8})?)?"
                  r"(\.db\.gz|\.db|\.dump)")


@dataclass(frozen=True)
class Archive:
    path: Path  # a temporary file; the caller removes it
    suffix: str
    sha256: str
    size: int  # bytes as stored (compressed)
    database_size: int  # bytes of the database it holds


@dataclass(frozen=True)
class Backup:
    """An object of the target that is a taskherd backup, with the moment its name says."""

    key: str
    kind: str  # snapshots or rollups
    taken_at: float
    size: int

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "kind": self.kind, "taken_at": self.taken_at, "bytes": self.size}


def backup_key(kind: str, now: float, suffix: str) -> str:
    """KIND/YYYY-MM-DD/HH-MM-SS.ffffff-NONCE.SUFFIX (UTC): keys sort by time, and no two
    backups share one. Keys of one a minute (snapshots) and one an hour (rollups) had a second
    backup in that minute, or a `backup rollup` by hand, replace the first; the microseconds
    and a random nonce keep apart two taken in one second, or by two nodes at one instant."""
    moment = datetime.fromtimestamp(now, UTC)
    return (f"{kind}/{moment:%Y-%m-%d}/{moment:%H-%M-%S.%f}-{secrets.token_hex(4)}"
            f"{suffix}")


def backups_in(objects: list[StoredObject]) -> list[Backup]:
    """The objects that are backups (others in the prefix are left alone), oldest first."""
    found = []
    for stored in objects:
        match = _KEY.fullmatch(stored.key)
        if match is None:
            continue
        kind, day, hour, minute, second, micros, _ = match.groups()
        moment = datetime.strptime(f"{day} {hour}:{minute or '00'}:{second or '00'}",
                                   "%Y-%m-%d %H:%M:%S")
        taken_at = moment.replace(tzinfo=UTC).timestamp() + int(micros or 0) / 1e6
        found.append(Backup(stored.key, kind, taken_at, stored.size))
    return sorted(found, key=lambda backup: (backup.taken_at, backup.kind, backup.key))


def expired(backups: list[Backup], kind: str, keep_for: float, keep_count: int,
            now: float) -> list[Backup]:
    """The backups of `kind` retention lets go: older than `keep_for`, or past the newest
    `keep_count`. The newest one always stays, however old: pruning never leaves none."""
    mine = sorted((b for b in backups if b.kind == kind), key=lambda b: b.taken_at, reverse=True)
    return [backup for rank, backup in enumerate(mine)
            if rank > 0 and (rank >= keep_count or backup.taken_at < now - keep_for)]


def make_archive(database: str, workdir: Path, level: int) -> Archive:
    """A consistent, compressed copy of the database in `workdir`, with its checksum."""
    from taskherd.store.sqlite import backup_file
    from taskherd.store.urls import is_postgres_url

    if is_postgres_url(database):
        return _pg_dump(database, workdir)
    copy = workdir / "snapshot.db"
    try:
        backup_file(Path(database), copy)  # checked with PRAGMA integrity_check before kept
    except StoreError as error:
        raise BackupError(f"snapshot of the database failed: {error}") from error
    try:
        database_size = copy.stat().st_size
        if level == 0:
            return Archive(copy, ".db", file_sha256(copy), database_size, database_size)
        packed = workdir / "snapshot.db.gz"
        private = os.open(packed, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(copy, "rb") as reader, open(private, "wb") as raw:
            hashing = _HashingWriter(raw)
            # mtime 0: the same database gives the same bytes, whenever it is packed.
            with gzip.GzipFile(fileobj=hashing, mode="wb", compresslevel=level, mtime=0) as out:
                shutil.copyfileobj(reader, out, CHUNK)
        return Archive(packed, ".db.gz", hashing.hexdigest(), packed.stat().st_size,
                       database_size)
    finally:
        if level != 0:
            copy.unlink(missing_ok=True)


def unpack(archive: Path, suffix: str, destination: Path) -> None:
    """The database file a SQLite backup holds, written to `destination`."""
    try:
        if suffix == ".db.gz":
            with gzip.open(archive, "rb") as reader, open(destination, "wb") as writer:
                shutil.copyfileobj(reader, writer, CHUNK)
        else:
            shutil.copyfile(archive, destination)
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise BackupError(f"the backup does not unpack: {error}") from error


def suffix_of(key: str) -> str:
    for suffix in (*SQLITE_SUFFIXES, PG_SUFFIX):
        if key.endswith(suffix):
            return suffix
    raise BackupError(f"{key!r} is not a taskherd backup (expected a .db.gz, .db or .dump)")


def pg_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BackupError(f"{name} was not found on PATH: install PostgreSQL's client tools "
                          "(e.g. apt-get install postgresql-client) in the daemon's environment")
    return found


def pg_command(tool: str, url: str) -> tuple[list[str], dict[str, str]]:
    """argv and environment for a PostgreSQL client tool: the password goes in PGPASSWORD,
    never on the command line, where every user of the host can read it in `ps`."""
    parts = urlsplit(url)
    env = dict(os.environ)
    if parts.password is not None:
        env["PGPASSWORD"] = unquote(parts.password)
        host = parts.netloc.rsplit("@", 1)[1]
        user = f"{parts.username}@" if parts.username else ""
        url = urlunsplit(parts._replace(netloc=f"{user}{host}"))
    return [pg_tool(tool), "--dbname", url], env


def _pg_dump(url: str, workdir: Path) -> Archive:
    dump = workdir / "snapshot.dump"
    argv, env = pg_command("pg_dump", url)
    run = subprocess.run([*argv, "--format", "custom", "--file", str(dump)], check=False, env=env,
                         capture_output=True, text=True, errors="replace", timeout=6 * 3600)
    if run.returncode != 0:
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        raise BackupError(f"pg_dump failed ({run.returncode}): "
                          f"{lines[0].strip() if lines else '(no output)'}",
                          run.stderr.strip() or None)
    size = dump.stat().st_size
    return Archive(dump, PG_SUFFIX, file_sha256(dump), size, size)


class _HashingWriter:
    """A file object that hashes what passes through it on its way to `raw`."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self._digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()

    def hexdigest(self) -> str:
        return self._digest.hexdigest()
