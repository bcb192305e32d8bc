"""Free space where the node writes (its data dir, log dir, SQLite database), as the file
system reports it, and a probe that writes to show a disk takes writes again.

Read with statvfs, a system call that touches no disk: one per folder per dispatcher pass
(cached by the pass's `now`), and the dispatcher's own passes reuse them for READINGS_KEPT, so
the floor costs a pass microseconds. The probe is only run
while the node is paused by a fault a reading may not show (a quota, a file system gone
read-only under a process that holds it open).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from taskherd.policy.faults import DiskReading, fault_of, fault_text

PROBE_BYTES = 64 << 10  # what a probe writes: a log's few next lines, a small settle
# The dispatcher's passes reuse readings this long (`readings(keep=)`): its first pass after an
# event reads them on the way to its claim (three folders: ~70 µs of a claim's ~1 ms here), and
# a busy node makes several passes a task. A disk filled in between is met by the writes
# (ENOSPC pauses the node as a fault, no strike), and the next reading says so. A run's end is
# judged on a reading of its own moment (`DiskPause.judge_end`).
READINGS_KEPT = 0.5


class FreeSpace:
    """The node's folders as statvfs reports them; `statvfs` is given in tests."""

    def __init__(self, statvfs: Callable[[str], Any] = os.statvfs):
        self._statvfs = statvfs
        self._read: tuple[float, tuple[str, ...], list[DiskReading]] | None = None

    def readings(self, folders: Sequence[Path], now: float,
                 keep: float = 0.0) -> list[DiskReading]:
        """Each folder's free space and whether it is read-only; read once per `now` (a pass),
        the same answer for every caller with that `now`, and for one that accepts readings
        up to `keep` s old. A folder that cannot be read is left out: what writing there says
        (a spawn's error) decides instead."""
        key = tuple(str(folder) for folder in folders)
        if self._read is not None and self._read[1] == key and (
                now == self._read[0] or 0 <= now - self._read[0] < keep):
            return self._read[2]
        readings = []
        for folder in key:
            try:
                try:
                    info = self._statvfs(folder)
                except FileNotFoundError:  # not made yet: it will live on its parent's disk
                    info = self._statvfs(_existing(folder))
            except OSError:
                continue
            readings.append(DiskReading(folder, info.f_bavail * info.f_frsize,
                                        bool(info.f_flag & os.ST_RDONLY)))
        self._read = (now, key, readings)
        return readings


def probe(folders: Sequence[Path]) -> str | None:
    """Write PROBE_BYTES to a new file in each folder, then remove it: the disk's own answer,
    which a quota (EDQUOT) gives and no statvfs shows. None when every write went through,
    else what the disk said ("disk full: [Errno 28] …")."""
    for folder in folders:
        try:
            fd, name = tempfile.mkstemp(prefix=".taskherd-probe-", dir=folder)
        except OSError as error:
            if fault_of(error) is not None:
                return fault_text(error)
            continue  # a folder not made yet, say: not the disk's answer
        try:
            written = 0
            while written < PROBE_BYTES:
                written += os.write(fd, bytes(PROBE_BYTES - written))
        except OSError as error:
            if fault_of(error) is not None:
                return fault_text(error)
        finally:
            os.close(fd)
            os.unlink(name)
    return None


def _existing(folder: str) -> str:
    """`folder`, or its nearest existing parent (a data dir not made yet lives on that disk)."""
    path = Path(folder)
    while not path.exists() and path.parent != path:
        path = path.parent
    return str(path)
