"""A service loop stops when cancelled, even when it is woken at the same moment (a
daemon's shutdown must not wait forever for a loop that swallowed its cancel)."""

from __future__ import annotations

import asyncio

from taskherd.services.runner import ServiceLoop, run_service


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
