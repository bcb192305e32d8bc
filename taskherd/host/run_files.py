"""A run's files (its log, its prompt) made ahead of its claim: empty private files waiting in
the log dir, each renamed to a run's file as the run starts.

Creating a file is on the way from a claim to its agent's exec; on ext4 each creation cost
0.13-0.46 ms (an inode and a directory entry, journalled), a rename within the folder a
fraction of that. The spares are made between runs (`fill`, by the supervisor's pass, well
after the agents it started are running) and named ``.spare-PID-N``: the monitor's pruning
of ``run-*`` never meets them, and a later daemon removes those an earlier one left.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PREFIX = ".spare-"


def create_private(path: Path) -> None:
    """An empty file only its owner may read (a run's prompt may hold the task's secrets)."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, 0o600))


class SpareFiles:
    """Up to `keep` empty 0600 files in `folder`, made ahead and taken one per run file."""

    def __init__(self, folder: Path, keep: int):
        self.folder = folder
        self.keep = keep
        self._ready: list[Path] = []
        self._made = 0  # names given so far
        self._cleared = False

    def fill(self) -> int:
        """Make spares until `keep` wait; the number made. A file that cannot be made (a full
        disk) leaves fewer: each run makes its own then, and says why if it cannot."""
        if not self._cleared:
            self._cleared = True
            self._clear_earlier()
        made = 0
        while len(self._ready) < self.keep:
            self._made += 1
            path = self.folder / f"{PREFIX}{os.getpid()}-{self._made}"
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC,
                                 0o600))
            except FileExistsError:
                continue
            except OSError:
                break
            self._ready.append(path)
            made += 1
        return made

    def take(self, path: Path) -> bool:
        """Rename a spare to `path`; False when none waits or `path` is there already (a
        rename would replace it): then the caller makes the file itself. Safe beside a
        `fill` in another thread (one list operation each)."""
        while self._ready:
            if os.path.lexists(path):
                return False
            try:
                spare = self._ready.pop()
            except IndexError:  # taken meanwhile
                return False
            try:
                os.rename(spare, path)
            except FileNotFoundError:
                continue  # removed under us: the next one
            except OSError:
                return False
            return True
        return False

    def take_private(self, path: Path) -> None:
        """`path` as an empty file only its owner may read: a spare renamed, or made now."""
        if not self.take(path):
            create_private(path)

    def _clear_earlier(self) -> None:
        """Remove the spares an earlier daemon left (one daemon a data dir: all of them)."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            if name.startswith(PREFIX):
                with contextlib.suppress(OSError):
                    os.unlink(self.folder / name)
