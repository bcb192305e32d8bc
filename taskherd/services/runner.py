"""The one loop every service runs under: a pass (`run_once(now)`), its counts kept, a store
error logged and the next pass tried, then a sleep until the service's next wake or an event.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from taskherd.store import StoreError

log = logging.getLogger("taskherd.daemon")


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
    counts: Counter[str] = field(default_factory=Counter)  # summed over every pass
    errors: int = 0


async def run_service(loop: ServiceLoop, clock: Callable[[], float]) -> None:
    while True:
        if loop.wake is not None:
            loop.wake.clear()
        await _pass(loop, clock)
        now = clock()
        try:
            wake_at = loop.service.next_wake(now)
        except StoreError as error:
            log.error("%s: %s", loop.name, error)
            wake_at = None
        timeout = loop.max_sleep if wake_at is None else min(max(wake_at - now, 0.0),
                                                              loop.max_sleep)
        if loop.wake is None:
            await asyncio.sleep(timeout)
            continue
        # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that lands
        # as the event is set, and the service loop went on forever: a daemon on a busy fleet
        # (events every second) hung in its stop, waiting for its scheduler to end.
        try:
            async with asyncio.timeout(timeout):
                await loop.wake.wait()
        except TimeoutError:
            pass


async def _pass(loop: ServiceLoop, clock: Callable[[], float]) -> None:
    now = clock()
    try:
        if loop.in_thread:
            counts = await asyncio.to_thread(loop.service.run_once, now)
        else:
            counts = loop.service.run_once(now)
    except StoreError as error:  # e.g. the database is away: the next pass tries again
        loop.errors += 1
        log.error("%s: %s", loop.name, error)
        return
    loop.counts.update({key: value for key, value in counts.items() if value})
    if loop.on_counts is not None:
        loop.on_counts(counts)
