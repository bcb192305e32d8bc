"""What /metrics and the API's live views read: one scrape's figures, a run's timing, and the
store's event channel. The API's counters and event hub call these, as every door does."""

from __future__ import annotations

from typing import Any

from taskherd.model import Cooldown
from taskherd.model.jobs import JobFire
from taskherd.model.record import Record
from taskherd.ops import Queue
from taskherd.store import StateCount
from taskherd.store.events import Listener

RECENT_FIRES = 50  # a scrape's view of the scheduler: its latest fires


class Scrape(Record):
    """The store's figures for one scrape: tasks by state and role, runs and cost by role and
    outcome, the cooldowns on now, the latest fires."""

    counts: list[StateCount]
    totals: list[dict[str, Any]]
    cooldowns: list[Cooldown]
    fires: list[JobFire]


def scrape(queue: Queue, now: float) -> Scrape:
    store = queue.store
    return Scrape(store.counts(), store.run_totals(), store.active_cooldowns(now),
                  store.list_fires(limit=RECENT_FIRES))


def run_timing(queue: Queue, run_id: int) -> dict[str, Any] | None:
    """A run's role, outcome and times: one row, not the run and its task."""
    return queue.store.run_timing(run_id)


def listen(queue: Queue) -> Listener:
    """The events committed from now on, by any process sharing the database."""
    return queue.store.listen()
