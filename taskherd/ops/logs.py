"""A run's log, read for a door that serves it to others (the HTTP API, the dashboard).

The path comes from the database. Whoever could write a row there must still not read any
file of the host through a door: a log is served only when its real path (symlinks
resolved, `..` collapsed) lies inside the data dir's log folder, and it is opened without
following a symlink planted after the check.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from taskherd.host import logfile
from taskherd.model import Run
from taskherd.ops import Queue
from taskherd.store import StoreError


class LogUnavailable(StoreError):
    """The run has no log to serve: none yet, pruned, or outside the log folder."""


def open_log(queue: Queue, run: Run) -> BinaryIO:
    """The run's log, opened for reading; LogUnavailable says why not."""
    if run.log_path is None:
        state = "ended before a process started" if run.ended_at else "has no process yet"
        raise LogUnavailable(f"run {run.id} has no log: it {state}")
    real = served_path(queue, run.log_path)
    if real is None:
        raise LogUnavailable(f"run {run.id}: its log path lies outside the log folder "
                             f"{queue.config.daemon.log_dir}; it is not served")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise LogUnavailable(f"the log of run {run.id} is gone: logs are pruned with their "
                             "finished tasks") from None
    except OSError as error:
        raise LogUnavailable(f"cannot read the log of run {run.id}: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would hang or never end
        os.close(fd)
        raise LogUnavailable(f"run {run.id}: its log is not a regular file")
    return os.fdopen(fd, "rb")


def served_path(queue: Queue, path: str) -> str | None:
    """`path` resolved (symlinks, `..`), if it lies inside the log folder; else None."""
    folder = os.path.realpath(queue.config.daemon.log_dir)
    real = os.path.realpath(path)
    return real if os.path.commonpath([folder, real]) == folder else None


def tail(log_file: BinaryIO, lines: int) -> bytes:
    """The last `lines` lines, read from a bounded window at the end (`taskherd.host.logfile.tail`:
    a long line is cut, with a marker); the file is left at its end, where a follow goes on."""
    return logfile.tail(log_file, lines)


def gate_log_tail(queue: Queue, log_path: str | None, lines: int = 40) -> str:
    """The last `lines` lines of a quality gate's log, as text (undecodable bytes replaced);
    a sentence saying why not when it has none, was pruned or lies outside the log folder."""
    if log_path is None:
        return "(no log)"
    real = served_path(queue, log_path)
    if real is None:
        return "(its log lies outside the log folder: not served)"
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "(its log is gone: logs are pruned with their finished tasks)"
    with os.fdopen(fd, "rb") as log_file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO would never end
            return "(its log is not a regular file)"
        return tail(log_file, lines).decode("utf-8", "replace")
