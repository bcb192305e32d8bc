"""The SQLite store: stdlib sqlite3, WAL, BEGIN IMMEDIATE, a long busy_timeout."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import traceback as traceback_module
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from taskherd import __version__
from taskherd.model import Finished, Run, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.store.base import StoreError
from taskherd.store.connection import Connection
from taskherd.store.errors import StoreDiskFull
from taskherd.store.events import SocketListener, publish, socket_dir
from taskherd.store.sql_credentials import token_digest
from taskherd.store.sql_store import Emitted, SQLStore, built
from taskherd.store.sqlfile import (
    latest_migration,
    machinery,
    newer_schema_error,
    pending,
    queries,
)
from taskherd.store.token_cache import RunCache, TokenCache
from taskherd.store.tokens import ApiToken

DURABILITY = ("full", "normal")  # machinery blocks durability_full, durability_normal
# Long enough that a burst of writers from several processes queues up instead of failing:
# "database is locked" must never reach a caller.
DEFAULT_BUSY_TIMEOUT = 60.0
# A search reads the tasks its index does not hold yet one by one: past this many (a few
# hundredths of a second of LIKE, as a short text's scan) it indexes them first, a chunk of
# TAIL_CHUNK a transaction.
LONG_TAIL = 20_000
TAIL_CHUNK = 5_000

Q = queries("sqlite")
M = machinery("sqlite")


class SQLiteStore(SQLStore):
    q = Q

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        autocheckpoint: bool = True,
    ):
        if durability not in DURABILITY:
            raise StoreError(f"durability {durability!r} is not one of: full, normal")
        self.path = Path(path)
        _create_private(self.path)
        self._events = socket_dir(self.path)
        self._events_folder = str(self._events)  # every commit stats it: no Path calls
        self._lock = threading.RLock()
        # .events: the commits' events a batch holds; .group: this thread's writes_grouped
        self._holding = threading.local()
        try:
            self._open(busy_timeout, durability, autocheckpoint)
        except sqlite3.Error as error:
            if _disk_full(error):  # its WAL index could not be made: no room for 32 KiB
                raise StoreDiskFull(f"opening {self.path}: {error}") from error
            raise StoreError(f"cannot open {self.path}: {error}") from error

    def _open(self, busy_timeout: float, durability: str, autocheckpoint: bool) -> None:
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, timeout=busy_timeout, check_same_thread=False
        )
        self._conn.row_factory = sqlite3.Row
        self._enable_wal()
        self._conn.execute(M[f"durability_{durability}"])
        self._conn.execute(M["foreign_keys_on"])
        if not autocheckpoint:
            # The daemon checkpoints from a worker thread instead: an automatic checkpoint
            # runs inside whichever commit crosses the threshold and, at durability full,
            # holds the event loop for the fsync of the whole database (p99 spawn latency).
            self._conn.execute(M["no_autocheckpoint"])
        self.busy_timeout = busy_timeout
        self._tokens = TokenCache(self._data_version)
        self._runs = RunCache(self._data_version)
        try:
            _migrate(self._conn)
        except BaseException:
            self._conn.close()
            raise

    def _enable_wal(self) -> None:
        # Switching to WAL needs a moment of exclusive access; two processes opening a fresh
        # database at once can meet here, and the busy handler is not consulted for it.
        deadline = time.monotonic() + 30
        while True:
            try:
                self._conn.execute(M["journal_wal"])
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _transaction(self) -> _Transaction | _Savepoint:
        """One transaction that takes the write lock up front, so it never has to upgrade; in a
        group of this thread's (`writes_grouped`), a savepoint of the group's transaction."""
        group = getattr(self._holding, "group", None)
        if group is not None:
            return _Savepoint(self._conn, group)
        return _Transaction(self._conn, self._lock)

    def _savepoint(self, db: Connection) -> _Inner:
        return _Inner(self._conn)

    def _transaction_lost(self, db: Connection) -> bool:
        return not self._conn.in_transaction

    @contextmanager
    def writes_grouped(self) -> Iterator[None]:
        # One BEGIN IMMEDIATE at the group's first write and one COMMIT at its end, each
        # write of the group a savepoint of it: a commit (and its fsync, at durability full)
        # a group rather than a write. The group's events are told after that commit, or
        # dropped with the group.
        with self._lock, self.events_held():
            held: list[Emitted] = self._holding.events
            told_before = len(held)
            group = self._holding.group = _Group()
            try:
                try:
                    yield
                finally:
                    self._holding.group = None
                if group.lost is not None:
                    lost = group.lost
                    raise (StoreDiskFull if _disk_full(lost) else StoreError)(
                        f"a write grouped with this one failed, and the group with it: {lost}")
                if group.begun:
                    _Transaction.end(self._conn, None, None)
            except BaseException:
                _roll_back(self._conn)
                del held[told_before:]  # nothing of the group was committed: nothing to tell
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as error:
                if _disk_full(error):  # a sort spilling to a temporary file, say
                    raise StoreDiskFull(str(error)) from error
                raise

    def _insert_many(self, db: Connection, name: str,
                     rows: Iterable[Mapping[str, Any]]) -> int:
        conn = cast(sqlite3.Connection, db)  # this store's transactions run on its own sqlite3
        # rowcount sums each statement's own changes (sqlite3_changes), 0 for a duplicate of an
        # open task's dedup key; total_changes would count the rows the statement's triggers
        # wrote too (the search index's, five more a task).
        return conn.executemany(self.q[name], rows).rowcount

    def _data_version(self) -> int:
        # Once a group holds the write lock (its BEGIN IMMEDIATE made), no other connection
        # can commit until its COMMIT: the number read first inside it stands for the rest
        # of the group's calls (a statement each, and the interpreter lock handed over).
        group: _Group | None = getattr(self._holding, "group", None)
        if group is not None and group.begun and group.version is not None:
            return group.version
        version = int(self._conn.execute(M["data_version"]).fetchone()[0])
        if group is not None and group.begun:
            group.version = version
        return version

    def live_api_token(self, token_sha256: str, now: float) -> ApiToken | None:
        with self._lock:
            return self._tokens.live(token_sha256, now, super().live_api_token)

    def revoke_api_token(self, name: str, now: float, *,
                         keep_an_admin: bool = True) -> ApiToken:
        with self._lock:
            self._tokens.forget()  # before: a group's revoke may still be rolled back after
            return super().revoke_api_token(name, now, keep_an_admin=keep_an_admin)

    def run_of_credential(self, token: str) -> Run | None:
        with self._lock:
            return self._runs.get(token_digest(token), lambda: super(
                SQLiteStore, self).run_of_credential(token))

    def _finish(self, db: Connection, run_id: int, result: RunResult, policy: RetryPolicy,
                now: float) -> Finished:
        self._runs.forget()  # every run's end passes here: its credential dies with it
        return super()._finish(db, run_id, result, policy, now)

    def _inserted(self, cursor: sqlite3.Cursor) -> tuple[int, None]:
        # SQLite's executemany refuses statements that return rows, so insert_task has no
        # RETURNING: the id comes from the cursor (a read of the row costs no round trip).
        assert cursor.lastrowid is not None
        return cursor.lastrowid, None

    def _is_foreign_key_error(self, error: Exception) -> bool:
        return isinstance(error, sqlite3.IntegrityError) and "FOREIGN KEY" in str(error)

    def _is_unique_error(self, error: Exception) -> bool:
        return isinstance(error, sqlite3.IntegrityError) and "UNIQUE" in str(error)

    def _text_query(self, words: Sequence[str]) -> str:
        # Each word quoted (a quote inside doubled): FTS5 reads it as a plain term, never as
        # an operator or a column filter; OR, so an entry matching some words still ranks.
        return " OR ".join('"' + word.replace('"', '""') + '"' for word in words)

    def _published(self, outbox: Sequence[Emitted]) -> None:
        held = getattr(self._holding, "events", None)
        if held is not None:
            held.extend(outbox)
            return
        publish(self._events_folder, built(outbox))

    @contextmanager
    def events_held(self) -> Iterator[None]:
        # Per thread: a write of another thread (the API's loop) is told at its commit.
        if getattr(self._holding, "events", None) is not None:
            yield  # held already, by an outer batch
            return
        held: list[Emitted] = []
        self._holding.events = held
        try:
            yield
        finally:
            self._holding.events = None
            if held:
                publish(self._events_folder, built(held))

    def listen(self) -> SocketListener:
        return SocketListener(self._events)

    def probe_write(self) -> None:
        # A connection of its own, and a real write into the file's schema, rolled back.
        try:
            conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            with contextlib.closing(conn):
                conn.execute(M["begin_write"])  # takes the write lock: fails on a read-only file
                try:
                    conn.execute(M["probe_table"])
                    conn.execute(M["probe_row"])
                finally:
                    conn.execute(M["rollback"])
        except sqlite3.Error as error:
            raise (StoreDiskFull if _disk_full(error) else StoreError)(str(error)) from error

    def checkpoint(self, truncate: bool = False, timeout: float | None = None) -> bool:
        # A connection of its own: the store's is guarded by a lock the event loop takes.
        statement = M["wal_checkpoint_truncate"] if truncate else Q["wal_checkpoint"]
        try:
            with contextlib.closing(sqlite3.connect(
                    self.path, timeout=self.busy_timeout if timeout is None else timeout)) as db:
                busy = db.execute(statement).fetchone()[0]
        except sqlite3.Error as error:
            if _disk_full(error):
                raise StoreDiskFull(f"WAL checkpoint: {error}") from error
            raise StoreError(f"WAL checkpoint: {error}") from error
        return not busy

    def index_task_text(self, most: int) -> int:
        # Not on the enqueue path (migration 0038): the search reads the tasks above the
        # mark one by one until a pass like this one takes them into the index.
        with self._write() as db:
            upto = db.execute(Q["text_index_upto"], {"most": most}).fetchone()["upto"]
            if upto is None:
                return 0
            indexed = db.execute(Q["index_task_text"], {"upto": upto}).rowcount
            db.execute(Q["move_text_mark"], {"upto": upto})
            return int(indexed)

    def _catch_up_text_index(self) -> None:
        if self._all("text_index_waiting")[0]["waiting"] <= LONG_TAIL:
            return
        # A write in a read path, on purpose: a tail this long is a burst faster than the
        # daemon's indexer, or tasks added while no daemon ran (nothing indexes them then),
        # and each search would read it all again; indexed once, it is read through the
        # index from then on. A file this process may not write leaves the tail as it is:
        # the search reads it, slower but right.
        try:
            while self.index_task_text(TAIL_CHUNK) == TAIL_CHUNK:
                pass
        except (sqlite3.Error, StoreError) as error:
            import logging  # here alone: a command that opens the store loads no logging

            logging.getLogger("taskherd.store").warning(
                "the search's index could not take the newest tasks (%s): the search reads "
                "them one by one", error)

    def backup(self, destination: Path) -> None:
        backup_file(self.path, destination, self.busy_timeout)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def backup_file(source: Path, destination: Path, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
                ) -> None:
    """Copy the database page by page inside one read transaction: a consistent snapshot,
    while the daemon goes on writing (WAL readers do not block writers).

    The copy is written beside `destination` and renamed into place once it is whole and
    passes an integrity check, so `destination` is never a half-written database.
    """
    if destination.exists():
        raise StoreError(f"{destination} already exists: give a new path")
    partial = destination.with_name(destination.name + ".partial")
    _create_private(partial)
    try:
        # Connections of their own: the store's is guarded by a lock the event loop takes.
        with contextlib.closing(sqlite3.connect(source, timeout=busy_timeout)) as origin, \
                contextlib.closing(sqlite3.connect(partial)) as copy:
            origin.backup(copy)
            copy.execute(M["journal_delete"])
            verdict = copy.execute(M["integrity_check"]).fetchone()[0]
        if verdict != "ok":
            raise StoreError(f"the copy failed its integrity check: {verdict}")
        os.replace(partial, destination)
    except sqlite3.Error as error:
        raise StoreError(f"backup of {source}: {error}") from error
    finally:
        partial.unlink(missing_ok=True)


def check_file(path: Path) -> None:
    """Raise StoreError unless `path` is a whole taskherd database (a file being restored)."""
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            verdict = db.execute(M["integrity_check"]).fetchone()[0]
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error as error:
        raise StoreError(f"not a readable SQLite database: {error}") from error
    if verdict != "ok":
        raise StoreError(f"it fails PRAGMA integrity_check: {verdict}")
    if not {"tasks", "schema_migrations"} <= tables:
        raise StoreError("a SQLite database, but not a taskherd one")


def migrations_applied(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT count(*) FROM schema_migrations").fetchone()[0])


def fold_wal(path: Path) -> None:
    """Copy what the file's WAL holds into it and empty the WAL, if it can be done at once
    (a file about to be set aside keeps its last transactions)."""
    with contextlib.suppress(sqlite3.Error), contextlib.closing(
            sqlite3.connect(path, timeout=5)) as db:
        db.execute(M["wal_checkpoint_truncate"]).fetchall()


def _create_private(path: Path) -> None:
    """Create the database file (and its folder) readable by its owner only.

    SQLite gives the -wal and -shm files the main file's permissions, so this covers them.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        # Never open and close an existing database file here: closing any descriptor of it
        # drops every POSIX lock this process holds on it, those of a connection already open
        # (the daemon's, when its HTTP API opens its own) included, and SQLite then reports
        # "database disk image is malformed" under concurrent writers.
        return
    with contextlib.suppress(FileExistsError):  # another process made it just now
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))


class _Transaction:
    """The context of `SQLiteStore._transaction`: a class rather than @contextmanager, since
    it is entered twice per claim+complete and a generator context costs that path."""

    __slots__ = ("conn", "lock")

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock):
        self.conn = conn
        self.lock = lock

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.conn.execute(M["begin_write"])
        except BaseException:
            self.lock.release()
            raise
        return self.conn

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            _Transaction.end(self.conn, kind, error)
        finally:
            self.lock.release()

    @staticmethod
    def end(conn: sqlite3.Connection, kind: type[BaseException] | None,
            error: BaseException | None) -> None:
        """Commit (`kind` None) or roll back the transaction open on `conn`."""
        if kind is None:
            try:
                conn.execute(M["commit"])
            except sqlite3.Error as failure:
                _roll_back(conn)
                error = failure
        else:
            _roll_back(conn)
        if error is not None and _disk_full(error):
            # The machine's fault, typed so that callers can tell it (faults.py): a
            # daemon keeps the run open and settles it later, a person reads one line.
            raise StoreDiskFull(str(error)) from error
        if kind is None and error is not None:
            raise error


class _Group:
    """A group of one thread's transactions committed as one (`writes_grouped`)."""

    __slots__ = ("begun", "lost", "version")

    def __init__(self) -> None:
        self.begun = False  # its BEGIN IMMEDIATE made, at its first write
        self.lost: BaseException | None = None  # why its transaction ended before its end
        self.version: int | None = None  # PRAGMA data_version, read once it was begun


class _Savepoint:
    """A transaction inside a group: its writes kept or rolled back alone, committed with
    the group's. The group holds the store's lock."""

    __slots__ = ("conn", "group")

    def __init__(self, conn: sqlite3.Connection, group: _Group):
        self.conn = conn
        self.group = group

    def __enter__(self) -> sqlite3.Connection:
        lost = self.group.lost
        if lost is not None:
            raise (StoreDiskFull if _disk_full(lost) else StoreError)(
                f"a write grouped with this one failed, and the group with it: {lost}")
        if not self.group.begun:
            self.conn.execute(M["begin_write"])
            self.group.begun = True
        self.conn.execute(M["savepoint"])
        return self.conn

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if kind is None:
            # Kept: released into the group's transaction, which its COMMIT ends. Left open,
            # a group's savepoints nested deeper with each call, and each write under them
            # cost SQLite ~11 µs more (a task's INSERT 21 µs in a group of 50, 10 with its
            # savepoint released, RELEASE included): more than the statement saves.
            try:
                self.conn.execute(M["release_savepoint"])
                return None
            except sqlite3.Error as failed:  # as the call's own failure: its writes undone
                self._undo(failed)
                raise StoreError(f"a grouped write could not be kept: {failed}") from failed
        self._undo(error)
        if error is not None and _disk_full(error):
            raise StoreDiskFull(str(error)) from error
        return None

    def _undo(self, error: BaseException | None) -> None:
        if self.conn.in_transaction:
            self.conn.execute(M["rollback_to_savepoint"])
            self.conn.execute(M["release_savepoint"])
        else:
            # SQLite ended the whole transaction itself (after SQLITE_FULL it may): the
            # writes of the group's earlier savepoints went with it.
            self.group.begun, self.group.lost = False, error



class _Inner:
    """A savepoint of the transaction under way (`SQLiteStore._savepoint`): SQLite's errors
    inside it, its writes rolled back, raised as StoreErrors; after one that ended the whole
    transaction (SQLITE_FULL may), raised as they are, for the transaction's end to name."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute(M["inner_savepoint"])
        return self.conn

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if kind is None:
            self.conn.execute(M["release_inner"])
            return
        if not self.conn.in_transaction:
            return
        # A statement of the failed part may still be open: a cursor its frames hold, to be
        # read after the statement that failed (a claim's steps are read together). Open,
        # it keeps the savepoint's release and the transaction's COMMIT from running; the
        # frames are done, and their cursors dropped with their locals.
        traceback_module.clear_frames(traceback)
        self.conn.execute(M["rollback_to_inner"])
        self.conn.execute(M["release_inner"])
        if isinstance(error, sqlite3.Error):
            raise (StoreDiskFull if _disk_full(error) else StoreError)(str(error)) from error


def _roll_back(conn: sqlite3.Connection) -> None:
    # SQLite may have rolled back already: after SQLITE_FULL it can end the transaction
    # itself, and a ROLLBACK then fails ("no transaction is active"), hiding the real error.
    if conn.in_transaction:
        conn.execute(M["rollback"])


def _disk_full(error: BaseException) -> bool:
    """SQLite's "database or disk is full" (SQLITE_FULL): a write met ENOSPC. Or its WAL
    index could not grow (SQLITE_IOERR_SHMSIZE, "disk I/O error"): SQLite writes a byte into
    each new page of the -shm file to allocate it, and that is its answer to ENOSPC there."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(error, sqlite3.Error) and code is not None and (
        code & 0xFF == sqlite3.SQLITE_FULL or code == sqlite3.SQLITE_IOERR_SHMSIZE)


def _migrate(db: sqlite3.Connection) -> None:
    """Apply the numbered migrations not yet recorded, each in its own transaction."""
    db.execute(M["create_schema_migrations"])
    applied = {row[0] for row in db.execute(M["applied_migrations"])}
    refused = newer_schema_error(applied, lambda version: _release_of(db, version), "sqlite")
    if refused:
        raise StoreError(refused)
    for migration in pending("sqlite", applied):
        db.execute(M["begin_write"])
        try:
            if not db.execute(M["migration_applied"], {"version": migration.version}).fetchone():
                for statement in migration.statements():
                    db.execute(statement)
                db.execute(M["record_migration"], {"version": migration.version,
                                                   "name": migration.name, "now": time.time()})
        except BaseException:
            db.execute(M["rollback"])
            raise
        db.execute(M["commit"])
    known = latest_migration("sqlite")
    if _release_of(db, known) is None:  # a write only the first time: opens are mostly reads
        db.execute(M["record_release"], {"version": known, "taskherd": __version__})


def _release_of(db: sqlite3.Connection, version: int) -> str | None:
    try:
        row = db.execute(M["release_of_schema"], {"version": version}).fetchone()
    except sqlite3.OperationalError:  # a schema from before releases were recorded
        return None
    return row[0] if row else None
