"""The loop every service runs under ends when the daemon cancels it, even on a busy fleet
whose events set the service's wake event all the time (a stop must never hang on it)."""

from __future__ import annotations

import asyncio
import time

from taskherd.services.runner import ServiceLoop, run_service


class Idle:
    def run_once(self, now: float) -> dict[str, int]:
        return {}

    def next_wake(self, now: float) -> float:
        return now + 1.0


async def cancel_while_woken() -> bool:
    """Cancel a service loop while its wake event is set again and again; whether it ended."""
    wake = asyncio.Event()
    service = asyncio.create_task(run_service(ServiceLoop("idle", Idle(), wake=wake), time.time))
    woken = True

    async def events() -> None:
        while woken:
            wake.set()
            await asyncio.sleep(0)

    waking = asyncio.create_task(events())
    for _ in range(3):
        await asyncio.sleep(0)
    service.cancel()
    done, _ = await asyncio.wait({service}, timeout=1.0)  # never cancels: a hang shows
    woken = False
    await waking
    if not done:
        service.cancel()
    return bool(done)


def test_a_cancelled_service_loop_ends_while_events_keep_waking_it():
    async def many() -> list[bool]:
        return [await cancel_while_woken() for _ in range(100)]

    assert all(asyncio.run(many()))
