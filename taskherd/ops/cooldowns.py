"""Cooldowns: the runtimes paused by a rate limit or a down endpoint, and ending one by hand."""

from __future__ import annotations

from taskherd.model import Cooldown
from taskherd.ops import Queue


def active_cooldowns(queue: Queue, now: float) -> list[Cooldown]:
    """The cooldowns still running at `now`."""
    return queue.store.active_cooldowns(now)


def clear_cooldown(queue: Queue, runtime: str) -> bool:
    """End `runtime`'s cooldown now: its tasks may start again. False: it had none."""
    return queue.store.clear_cooldown(runtime)
