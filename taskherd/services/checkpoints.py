"""WAL checkpoints: copy what is committed into the database file, so the WAL stays short.

Run in a worker thread (the runner's `in_thread`): a checkpoint waits on the disk, and no
commit of the event loop should pay for it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from taskherd.store import Store, StoreError


@dataclass(frozen=True)
class CheckpointSettings:
    interval: float = 2.0  # seconds between two checkpoints (each copies what is committed)


class Checkpoints:
    def __init__(self, store: Store, settings: CheckpointSettings = CheckpointSettings()):
        self.store = store
        self.settings = settings

    def run_once(self, now: float) -> dict[str, int]:
        try:
            self.store.checkpoint()
        except sqlite3.Error as error:  # a busy or locked file: the next pass tries again
            raise StoreError(f"WAL checkpoint: {error}") from error
        return {"checkpoints": 1}

    def next_wake(self, now: float) -> float:
        return now + self.settings.interval
