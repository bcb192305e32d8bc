"""The store's errors, worded for people: what was asked, what was found."""

from __future__ import annotations

from collections.abc import Iterable

from taskherd.model import Fault, TaskState
from taskherd.model.record import Record


class StoreError(Exception):
    """Base of the store's errors meant for people."""


class StoreUnavailable(StoreError):
    """The database cannot serve this call now (connection lost, deadlock): try again later."""


class StoreDiskFull(StoreUnavailable):
    """The database could not write: its disk is full (SQLite's "database or disk is full",
    PostgreSQL's disk_full). The transaction was rolled back, nothing changed; it may be tried
    again once space is freed. The machine's fault, not the caller's (faults.py)."""

    fault = Fault.DISK

    def __init__(self, detail: str):
        super().__init__(f"disk full: the database could not write ({detail}); free space "
                         "on its disk, then try again")


class TaskNotFound(StoreError):
    def __init__(self, task_id: int):
        super().__init__(f"no task with id {task_id}")
        self.task_id = task_id


class ParentNotFound(TaskNotFound):
    """A new task names a parent_id no task has: bad input, like an unknown task id."""

    def __init__(self, parent_id: int):
        StoreError.__init__(self, f"parent_id = {parent_id}: no task with that id")
        self.task_id = parent_id


class RunNotFound(StoreError):
    def __init__(self, run_id: int):
        super().__init__(f"no run with id {run_id}")
        self.run_id = run_id


class SpawnAllowance(Record):
    """What a run may still add below its task: at most `max_spawn` tasks and jobs since
    `since` (its claim). Counted in the transaction that adds, under a lock on the task, so
    two additions at once cannot both take the last place."""

    task_id: int
    since: float
    max_spawn: int


def max_spawn_reached(added: int, max_spawn: int) -> str:
    return f"refused: this run already added {added} tasks and jobs (max_spawn {max_spawn})"


class SpawnLimitReached(StoreError):
    def __init__(self, added: int, max_spawn: int):
        super().__init__(max_spawn_reached(added, max_spawn))
        self.added, self.max_spawn = added, max_spawn


class ReportRefused(StoreError):
    """The run was reported already, otherwise: the first report of a run stands."""


class TransitionRefused(StoreError):
    """The task is not in a state the transition may leave."""

    def __init__(self, task_id: int, action: str, found: TaskState, allowed: Iterable[TaskState]):
        names = ", ".join(sorted(s.value for s in allowed))
        super().__init__(
            f"cannot {action} task {task_id}: it is {found.value} (allowed from: {names})")
        self.task_id = task_id
        self.found = found


# What a person can do about each fault of the machine a database call can meet.
_LOCKED = ("the database is locked: another process held its write lock longer than this "
           "command waits (taskherd --busy-timeout SECONDS, default 60): try again once it "
           "is done")
_FULL = "the disk holding the database is full ({said}): free space there and try again"
_READ_ONLY = ("the database cannot be written ({said}): check that its file, folder and disk "
              "are writable (taskherd doctor), then try again")
_IO = ("the database's disk failed a read or write ({said}): it may be full or failing; "
       "free space or check the disk (taskherd doctor), then try again")
_LOST = ("the database is out of reach ({said}): check that the PostgreSQL server runs and "
         "lets this host in, then try again")
_BUSY = "the database could not do this now ({said}): try again"
_DAMAGED = ("the database file is damaged ({said}): stop the daemon and restore the latest "
            "backup (taskherd backup restore)")


def environment_fault(error: BaseException) -> str | None:
    """A fault of the machine that a database call met, on one line saying what happened and
    what to do; None for any other error (a bug keeps its traceback). Reads the error's type:
    StoreUnavailable, a driver's operational error that reached past the store (sqlite3's
    "database is locked" past busy_timeout, "database or disk is full"; psycopg's lost
    connection), or the OSError of a full or read-only disk; else its cause's. The doors ask
    here, so none imports a driver."""
    if isinstance(error, StoreDiskFull):
        return str(error)  # the store said it whole: what, and what to do
    cause = error.__cause__
    if cause is not None and (_is_driver_error(cause) or isinstance(cause, OSError)):
        return _fault(cause)  # the driver's error a StoreError wraps says more than it does
    return _fault(error)


def _is_driver_error(error: BaseException) -> bool:
    import sqlite3
    import sys

    psycopg = sys.modules.get("psycopg")
    return isinstance(error, sqlite3.Error) or (psycopg is not None
                                                and isinstance(error, psycopg.Error))


def _fault(error: BaseException) -> str | None:
    import errno
    import sqlite3
    import sys

    said = " ".join(str(error).split()) or type(error).__name__  # libpq's span lines
    psycopg = sys.modules.get("psycopg")  # not imported: none of its errors can exist
    if isinstance(error, sqlite3.DatabaseError):
        # SQLite names its faults in words only; any other (no such column…) is a bug.
        if "locked" in said or "busy" in said:
            return _LOCKED
        if "full" in said:
            return _FULL.format(said=said)
        if "readonly" in said or "read-only" in said:
            return _READ_ONLY.format(said=said)
        if "disk I/O" in said:  # a full disk met while growing the WAL's index says so
            return _IO.format(said=said)
        if "malformed" in said or "not a database" in said:
            return _DAMAGED.format(said=said)
        return None
    if psycopg is not None and isinstance(error, psycopg.OperationalError
                                          | psycopg.InterfaceError):
        state = getattr(error, "sqlstate", None)
        if state is None and _refused_at_login(said):
            return None  # the server answered: no such database or role, a wrong password
        # No SQLSTATE: libpq lost or never made the connection; 08: connection exception;
        # 57P: the server shutting down. Else a deadlock or serialization failure.
        if state is None or state.startswith(("08", "57P")):
            return _LOST.format(said=said)
        return _BUSY.format(said=said)
    if isinstance(error, StoreUnavailable):  # one without a driver's error behind it
        return f"the database cannot serve this now ({said}): try again (taskherd doctor checks it)"
    # An OSError names its file, which may not be the database's (a backup's copy).
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"a disk is full ({said}): free space there and try again"
    if isinstance(error, OSError) and error.errno == errno.EROFS:
        return f"a disk is read-only ({said}): remount it writable, then try again"
    return None


def _refused_at_login(said: str) -> bool:
    """A server that refused the login for what the URL says (the config's fault, not the
    machine's); libpq gives such errors no SQLSTATE, only their words."""
    passing = ("starting up", "shutting down", "in recovery", "too many", "terminating")
    return "FATAL:" in said and not any(words in said for words in passing)
