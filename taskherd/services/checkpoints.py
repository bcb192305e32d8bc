"""WAL checkpoints: copy what is committed into the database file, so the WAL stays short.

Run in a worker thread (the runner's `in_thread`): a checkpoint waits on the disk, and no
commit of the event loop should pay for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskherd.store import Store


@dataclass(frozen=True)
class CheckpointSettings:
    interval: float = 2.0  # seconds between two checkpoints (each copies what is committed)


class Checkpoints:
    def __init__(self, store: Store, settings: CheckpointSettings = CheckpointSettings()):
        self.store = store
        self.settings = settings

    def run_once(self, now: float) -> dict[str, int]:
        self.store.checkpoint()  # a StoreError (a busy file) is logged; the next pass retries
        return {"checkpoints": 1}

    def next_wake(self, now: float) -> float:
        return now + self.settings.interval
