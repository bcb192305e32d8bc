"""Four real processes claim and finish from one database until 10,000 tasks are done.

Every task must be claimed exactly once (one run each, all completed), and no worker may see
an exception. On SQLite the store's busy_timeout and BEGIN IMMEDIATE must keep "database is
locked" from ever reaching a caller; on PostgreSQL the four are four nodes, and a claim skips
the rows another one is claiming (FOR UPDATE SKIP LOCKED) instead of taking them twice.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections import Counter

import pytest

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import open_store

TASKS = 10_000
WORKERS = 4
NOW = 1_700_000_000.0  # time is passed in; nothing here waits for a clock
# `normal` durability: at `full` each of the 20,000 commits waits for an fsync, which tests
# the disk rather than the locking; contention between the processes is the same either way.
DURABILITY = "normal"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "taskherd.db")
    return request.getfixturevalue("pg_url")


def worker(database: str, node: str, start: multiprocessing.synchronize.Event, out) -> None:
    """Claim and finish until the queue is empty; send back (node, task ids, error or None)."""
    claimed: list[int] = []
    try:
        store = open_store(database, durability=DURABILITY)
        policy, success = RetryPolicy(), RunResult(Outcome.SUCCEEDED)
        start.wait(60)  # all four begin together, so they really contend
        while (claim := store.claim(ClaimRequest(node, NOW, 600.0))) is not None:
            claimed.append(claim.task.id)
            store.finish_run(claim.run.id, success, policy, NOW)
        store.close()
        out.put((node, claimed, None))
    except BaseException:  # noqa: BLE001 - every failure goes back to the test, named
        out.put((node, claimed, traceback.format_exc()))


@pytest.mark.timeout(400)  # above the workers' own wait below, so that one speaks first
def test_four_processes_claim_every_task_exactly_once(database: str) -> None:
    with open_store(database, durability=DURABILITY) as store:
        created = store.enqueue_many(
            [NewTask(role="worker", title=f"task {i}") for i in range(TASKS)], NOW
        )
    assert created == TASKS

    context = multiprocessing.get_context("spawn")
    start, out = context.Event(), context.Queue()
    processes = [
        context.Process(target=worker, args=(database, f"node-{i}", start, out))
        for i in range(WORKERS)
    ]
    for process in processes:
        process.start()
    start.set()
    # Results are read before join: a child blocks on exit until its queue data is consumed.
    # The timeout only guards against a hang: on a loaded 2-core machine PostgreSQL's 20,000
    # transactions have taken over 90 s.
    results = [out.get(timeout=300) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0, f"worker {process.name} exited {process.exitcode}"

    errors = {node: error for node, _, error in results if error}
    assert not errors, "a worker saw an exception:\n" + "\n".join(
        f"{node}:\n{error}" for node, error in errors.items()
    )
    every_claim = [task_id for _, claimed, _ in results for task_id in claimed]
    assert len(every_claim) == TASKS
    assert len(set(every_claim)) == TASKS, "a task was claimed twice"
    # Each worker got a share: otherwise this would not have tested contention at all.
    assert all(claimed for _, claimed, _ in results), [len(c) for _, c, _ in results]

    with open_store(database, durability=DURABILITY) as store:
        runs = store.list_runs(limit=2 * TASKS)
        counts = {(count.state, count.role): count.count for count in store.counts()}
    assert Counter(Counter(run.task_id for run in runs).values()) == {1: TASKS}
    assert Counter(run.outcome for run in runs) == {Outcome.SUCCEEDED: TASKS}
    assert counts == {(TaskState.COMPLETED, "worker"): TASKS}
