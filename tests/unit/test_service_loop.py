"""A service loop stops when cancelled, even when it is woken at the same moment (a
daemon's shutdown must not wait forever for a loop that swallowed its cancel), and a pass
that met a store error is tried again soon, not after the service's whole sleep."""

from __future__ import annotations

import asyncio

from taskherd.services import runner
from taskherd.services.runner import ServiceLoop, run_service
from taskherd.store import StoreUnavailable


class Idle:
    def run_once(self, now: float) -> dict[str, int]:
        return {}

    def next_wake(self, now: float) -> float:
        return now + 60.0


def test_a_loop_woken_and_cancelled_together_stops():
    async def scenario() -> int:
        wake = asyncio.Event()
        stopped = 0
        for _ in range(50):  # the race is at one moment of the wait: try it many times
            loop = ServiceLoop("idle", Idle(), wake=wake, max_sleep=60.0)
            task = asyncio.create_task(run_service(loop, lambda: 0.0))
            await asyncio.sleep(0)  # into its wait
            await asyncio.sleep(0)
            wake.set()
            task.cancel()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
            stopped += task.cancelled()
        return stopped

    assert asyncio.run(scenario()) == 50


class AwayOnce:
    """A service whose first pass meets a database that is away; it sleeps a minute after
    every pass, and nothing wakes it."""

    def __init__(self) -> None:
        self.passes = 0
        self.second_pass = asyncio.Event()

    def run_once(self, now: float) -> dict[str, int]:
        self.passes += 1
        if self.passes == 1:
            raise StoreUnavailable("database error: terminating connection")
        self.second_pass.set()
        return {"done": 1}

    def next_wake(self, now: float) -> float:
        return now + 60.0


def test_a_pass_that_met_a_store_error_is_tried_again_without_waiting_for_its_sleep(
        monkeypatch):
    monkeypatch.setattr(runner, "RETRY_AFTER_ERROR", 0.05)

    async def scenario() -> ServiceLoop:
        service = AwayOnce()
        loop = ServiceLoop("dispatcher", service, wake=asyncio.Event(), max_sleep=60.0)
        task = asyncio.create_task(run_service(loop, lambda: 0.0))
        try:
            await asyncio.wait_for(service.second_pass.wait(), 10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return loop

    loop = asyncio.run(scenario())
    assert loop.errors == 1 and loop.counts["done"] == 1
