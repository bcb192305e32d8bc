"""The task search's text index, kept in batches: a task added is not indexed on the way in
(an enqueue writes no index page; SQLite's FTS5 index cost a batched enqueue two thirds of
its rate), and this service takes the newest tasks into the index behind them.

Until it has, the search reads those tasks one by one (store/sql/common/task_lists.sql,
searched_tail): a search is right whether or not a pass ran, only slower while many wait.
Each chunk is its own short writing transaction, so a claim waits at most one chunk; the
pass goes on while chunks come back full and sleeps once the index has caught up.
Run in a thread: a chunk's index pages are disk work. PostgreSQL indexes each task as it is
added, and its store finds nothing to do here.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskherd.store import Store


@dataclass(frozen=True)
class TextIndexSettings:
    # Tasks a transaction indexes: about 20 ms of FTS5 work at a few hundred characters a
    # task, the longest a dispatcher's claim waits for the write lock on its account.
    chunk: int = 1000
    chunks_a_pass: int = 20  # then the loop's other services get the store for a while
    interval: float = 5.0  # seconds between passes once caught up


class TextIndexer:
    def __init__(self, store: Store, settings: TextIndexSettings = TextIndexSettings()):
        self.store = store
        self.settings = settings
        self._behind = False  # the last pass stopped with chunks still full

    def run_once(self, now: float) -> dict[str, int]:
        indexed, self._behind = 0, False
        for _ in range(self.settings.chunks_a_pass):
            taken = self.store.index_task_text(self.settings.chunk)
            indexed += taken
            if taken < self.settings.chunk:
                return {"indexed": indexed}
        self._behind = True
        return {"indexed": indexed}

    def next_wake(self, now: float) -> float:
        return now if self._behind else now + self.settings.interval
