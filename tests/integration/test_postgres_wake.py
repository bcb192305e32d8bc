"""Nodes sharing a PostgreSQL database wake each other: a transition that may give a node work
NOTIFYs at commit, and every daemon LISTENs (`listen_for_wakes`)."""

from __future__ import annotations

import asyncio

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.queue import RetryPolicy
from taskherd.store.postgres import PostgresStore, listen_for_wakes

NOW = 1_700_000_000.0


@pytest.fixture
def store(pg_url):
    opened = PostgresStore(pg_url, durability="normal")
    yield opened
    opened.close()


async def wakes_after(url: str, change, count: int = 1) -> int:
    """Listen, make `change` from another connection, and count the wake-ups it brings."""
    woken = asyncio.Queue()
    listener = asyncio.create_task(listen_for_wakes(url, lambda: woken.put_nowait(1)))
    try:
        await asyncio.wait_for(woken.get(), 20)  # listening: the first call says so
        await asyncio.to_thread(change)
        for _ in range(count):
            await asyncio.wait_for(woken.get(), 20)
        await asyncio.sleep(0)  # let a stray extra wake-up be counted too
        return count + woken.qsize()
    finally:
        listener.cancel()


def test_a_task_added_on_one_node_wakes_the_others(store, pg_url):
    def add() -> None:
        with PostgresStore(pg_url, durability="normal") as other:
            other.enqueue(NewTask(role="coder", title="from another host"), NOW)

    assert asyncio.run(wakes_after(pg_url, add)) >= 1


def test_a_person_releasing_a_task_wakes_the_nodes(store, pg_url):
    task = store.enqueue(NewTask(role="coder", title="held", pending=True), NOW).task
    assert asyncio.run(wakes_after(pg_url, lambda: store.approve(task.id, NOW))) >= 1


def test_only_what_may_give_a_node_work_wakes_the_nodes(store):
    """A node's own claims and ends would only make every node look again for nothing."""
    nudges = []
    store._nudge = lambda db: nudges.append(1)  # the store's one way to NOTIFY

    def count(step) -> int:
        nudges.clear()
        step()
        return len(nudges)

    first = store.enqueue(NewTask(role="coder", title="x"), NOW).task
    assert count(lambda: store.enqueue(NewTask(role="coder", title="y"), NOW)) == 1
    claim = store.claim("n1", NOW, 60.0)
    assert claim is not None and claim.task.id == first.id
    assert count(lambda: store.claim("n1", NOW, 60.0)) == 0
    assert count(lambda: store.heartbeat(claim.run.id, NOW, 60.0)) == 0
    done = RunResult(Outcome.SUCCEEDED)
    assert count(lambda: store.finish_run(claim.run.id, done, RetryPolicy(), NOW)) == 0
    held = store.enqueue(NewTask(role="coder", title="z", pending=True), NOW).task
    assert count(lambda: store.approve(held.id, NOW)) == 1
    assert count(lambda: store.enqueue_many([NewTask(role="coder", title="w")], NOW)) == 1
