"""The one loop every service runs under: a pass (`run_once(now)`), its counts kept, a store
error logged and the next pass tried soon, then a sleep until the service's next wake or an
event.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from taskherd.model.settings import Config
from taskherd.store import StoreError

log = logging.getLogger("taskherd.daemon")
# Seconds before a pass that met a store error is tried again, however long the service would
# sleep: a database away for a moment (a restart, a failover) must not hold a loop back for
# its whole sleep, nor for the event that came while nobody listened.
RETRY_AFTER_ERROR = 5.0


class Service(Protocol):
    def run_once(self, now: float) -> Mapping[str, int]: ...

    def next_wake(self, now: float) -> float | None: ...


@dataclass
class ServiceLoop:
    """How one service is run: what wakes it early, how long it may sleep at most, whether
    its pass leaves the event loop (it waits on the disk), and who hears its counts."""

    name: str
    service: Service
    wake: asyncio.Event | None = None
    max_sleep: float = 60.0
    in_thread: bool = False
    on_counts: Callable[[Mapping[str, int]], None] | None = None
    reload: Callable[[Config], None] | None = None  # takes the reloaded config, if it reads one
    stop: Callable[[], None] | None = None  # abandons work under way when the daemon stops
    counts: Counter[str] = field(default_factory=Counter)  # summed over every pass
    errors: int = 0


async def run_service(loop: ServiceLoop, clock: Callable[[], float]) -> None:
    while True:
        if loop.wake is not None:
            loop.wake.clear()
        passed = await _pass(loop, clock)
        now = clock()
        try:
            wake_at = loop.service.next_wake(now)
        except StoreError as error:
            log.error("%s: %s", loop.name, error)
            wake_at, passed = None, False
        timeout = loop.max_sleep if wake_at is None else min(max(wake_at - now, 0.0),
                                                              loop.max_sleep)
        if not passed:
            timeout = min(timeout, RETRY_AFTER_ERROR)
        if loop.wake is None:
            await asyncio.sleep(timeout)
            continue
        # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that
        # arrives as the event is set, and a loop woken often (a busy queue) then ran on
        # after the daemon's stop had cancelled it, so `taskherd stop` never finished.
        try:
            async with asyncio.timeout(timeout):
                await loop.wake.wait()
        except TimeoutError:
            pass
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            # Python 3.11's wait_for returns the wait's result when a wake and a cancel
            # arrive together, swallowing the cancel: the loop then ran forever and the
            # daemon's shutdown waited for it (a settle wakes the deliverer as it stops).
            raise asyncio.CancelledError


async def _pass(loop: ServiceLoop, clock: Callable[[], float]) -> bool:
    """One pass of the service; False if it met a store error (logged and counted)."""
    now = clock()
    try:
        if loop.in_thread:
            counts = await asyncio.to_thread(loop.service.run_once, now)
        else:
            counts = loop.service.run_once(now)
    except StoreError as error:  # e.g. the database is away: the next pass tries again
        loop.errors += 1
        log.error("%s: %s", loop.name, error)
        return False
    loop.counts.update({key: value for key, value in counts.items() if value})
    if loop.on_counts is not None:
        loop.on_counts(counts)
    return True
