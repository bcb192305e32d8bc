"""WAL checkpoints: copy what is committed into the database file, so the WAL stays short.

Run in a worker thread (the runner's `in_thread`): a checkpoint waits on the disk, and no
commit of the event loop should pay for it. After a snapshot the WAL is also truncated to
zero bytes; a reader holding it (an agent's CLI, a status watch) makes that attempt give up
after `truncate_wait`, and the next pass tries again, logged, instead of waiting for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from taskherd.store import Store

log = logging.getLogger("taskherd.checkpoints")


@dataclass(frozen=True)
class CheckpointSettings:
    interval: float = 2.0  # seconds between two checkpoints (each copies what is committed)
    truncate_wait: float = 1.0  # how long a TRUNCATE checkpoint waits for readers


class Checkpoints:
    def __init__(self, store: Store, settings: CheckpointSettings = CheckpointSettings()):
        self.store = store
        self.settings = settings
        self.truncate_wanted = False
        self._truncate_tries = 0

    def request_truncate(self) -> None:
        """Empty the WAL at the next pass (and the ones after, until it completes)."""
        self.truncate_wanted = True

    def run_once(self, now: float) -> dict[str, int]:
        if not self.truncate_wanted:
            self.store.checkpoint()  # a StoreError (a busy file) is logged; the next pass retries
            return {"checkpoints": 1}
        self._truncate_tries += 1
        if self.store.checkpoint(truncate=True, timeout=self.settings.truncate_wait):
            self.truncate_wanted, self._truncate_tries = False, 0
            return {"checkpoints": 1, "truncated": 1}
        log.warning("WAL truncate could not complete: a reader holds the log (try %s); "
                    "trying again in %.0fs", self._truncate_tries, self.settings.interval)
        return {"checkpoints": 1, "truncate_busy": 1}

    def next_wake(self, now: float) -> float:
        return now + self.settings.interval
