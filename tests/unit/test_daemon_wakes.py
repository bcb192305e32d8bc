"""Which services an event wakes: the dispatcher and the scheduler for any change that may
give work, the deliverer only for rows queued or retried for delivery (its pass, in a
thread, reads the store under the lock the dispatcher's claim takes)."""

from __future__ import annotations

import asyncio

from taskherd.config import parse_config
from taskherd.daemon import Daemon
from taskherd.model import Event, EventKind, TaskState


class Heard:
    def hear(self, event: Event) -> None:
        pass


async def woken(daemon: Daemon, event: Event) -> set[str]:
    async def events():
        yield event

    await daemon._wake_on_events(events(), Heard(), Heard())
    flags = {"dispatcher": daemon._wake, "scheduler": daemon._schedule,
             "deliverer": daemon._deliver}
    return {name for name, flag in flags.items() if flag.is_set()}


def test_a_new_task_wakes_the_dispatcher_not_the_deliverer(tmp_path):
    config = parse_config({"roles": {"coder": {"command": ["true"]}}}, base_dir=tmp_path)
    added = Event(EventKind.TASK_ADDED, 1.0, task_id=1, state=TaskState.READY, role="coder")
    ended = Event(EventKind.TASK_CHANGED, 1.0, task_id=1, state=TaskState.COMPLETED)
    assert asyncio.run(woken(Daemon(config), added)) == {"dispatcher", "scheduler"}
    assert asyncio.run(woken(Daemon(config), ended)) == {"dispatcher", "scheduler"}


def test_rows_queued_for_delivery_wake_the_deliverer(tmp_path):
    config = parse_config({"roles": {"coder": {"command": ["true"]}}}, base_dir=tmp_path)
    queued = Event(EventKind.DELIVERY_QUEUED, 1.0, task_id=1)
    assert "deliverer" in asyncio.run(woken(Daemon(config), queued))
