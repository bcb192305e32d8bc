"""Interleave two stores' transactions on one PostgreSQL database, step by step.

A test pauses one store just before a named SQL block (inside its transaction, holding the
row locks it has taken so far), lets another store run into it, and waits on conditions with
a deadline: nothing sleeps for time to pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

LOCK_WAITS = ("SELECT count(*) FROM pg_stat_activity"
              " WHERE datname = current_database() AND wait_event_type = 'Lock'")


def pause_before(store: Any, block: str) -> tuple[threading.Event, threading.Event]:
    """Make `store` stop just before it runs its named SQL `block`, until `go_on` is set;
    `reached` is set when it gets there. Returns (reached, go_on)."""
    reached, go_on = threading.Event(), threading.Event()
    blocks = store.q

    class Paused(dict):
        def __getitem__(self, name: str) -> str:
            if name == block:
                reached.set()
                go_on.wait(30)  # bounded: a failing test must not hang its thread
            return blocks[name]

    store.q = Paused(blocks)
    return reached, go_on


def wait_for_lock_wait_or(done: Callable[[], bool], url: str, timeout: float = 10.0) -> None:
    """Until `done()`, or a session of the database waits for a lock another one holds."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as watcher:
        while not done() and watcher.execute(LOCK_WAITS).fetchone()[0] == 0:
            assert time.monotonic() < deadline, "neither done nor waiting for a lock"
            time.sleep(0.01)
