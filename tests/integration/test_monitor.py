"""The monitor's housekeeping, with time passed in, once per store (`database`)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.services.monitor import Monitor
from taskherd.services.supervisor import LiveRuns
from taskherd.store import Store, open_store
from tests.interleave import pause_before, wait_for_lock_wait_or


@pytest.fixture
def store(database):
    with open_store(database, durability="normal") as opened:
        yield opened


def monitor_for(tmp_path: Path, store: Store) -> Monitor:
    config = parse_config({"daemon": {"data_dir": str(tmp_path / "data"), "node": "n1",
                                      "retention": "1d", "lease": "60s"}}, base_dir=tmp_path)
    config.daemon.log_dir.mkdir(parents=True)
    return Monitor(config, store, LiveRuns({}, {}))


def test_old_finished_tasks_and_their_log_files_are_pruned(tmp_path, store):
    monitor = monitor_for(tmp_path, store)
    logs = monitor.config.daemon.log_dir
    old = store.enqueue(NewTask(role="r", title="old"), 1000.0).task
    claim = store.claim(ClaimRequest("n1", 1000.0, 60))
    store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1001.0)
    young = store.enqueue(NewTask(role="r", title="young"), 1000.0).task
    running = store.claim(ClaimRequest("n1", 1000.0 + 86400, 60))
    for run_id in (claim.run.id, running.run.id):
        (logs / f"run-{run_id}.log").write_text("output\n")
        os.utime(logs / f"run-{run_id}.log", (1001.0, 1001.0))
    counts = monitor.run_once(1000.0 + 86400 + 10)
    assert counts["pruned"] == 1 and counts["logs_pruned"] == 1
    assert [t.id for t in store.list_tasks()] == [young.id]
    assert not (logs / f"run-{claim.run.id}.log").exists()
    assert (logs / f"run-{running.run.id}.log").exists()  # its run is still open
    assert store.get_task(young.id).state is TaskState.CLAIMED
    assert old.id != young.id


def test_a_claim_never_spawned_goes_back_to_ready_without_a_strike(tmp_path, store):
    monitor = monitor_for(tmp_path, store)
    task = store.enqueue(NewTask(role="r", title="t"), 1000.0).task
    store.claim(ClaimRequest("n1", 1000.0, 600))
    assert monitor.run_once(1000.0 + 10)["never_spawned"] == 0
    assert monitor.run_once(1000.0 + 31)["never_spawned"] == 1
    after = store.get_task(task.id)
    assert after.state is TaskState.READY and after.attempts == 0
    assert store.runs_of_task(task.id)[0].outcome is Outcome.LOST


def test_a_rescue_leaves_a_run_to_the_node_settling_it(tmp_path, pg_url):
    # PostgreSQL only: SQLite has one writer at a time, so a rescue and a settlement never
    # interleave there. Here they did: the rescue locked the expired task, then waited for its
    # run, which its node (late, not dead) had just ended and whose task it was waiting to
    # settle. The server broke the deadlock by aborting the settlement: the agent's success
    # was recorded as a lost run and its work done again.
    with open_store(pg_url, durability="normal") as node, \
            open_store(pg_url, durability="normal") as other:
        task = node.enqueue(NewTask(role="r", title="t"), 1000.0).task
        claim = node.claim(ClaimRequest("n0", 1000.0, 60))
        node.mark_spawned(claim.run.id, 1000.0, 60, pid=1, pid_started_at=1.0, log_path=None)
        monitor = monitor_for(tmp_path, other)  # node n1's, which finds n0's lease expired
        rescue_holds_the_task, go_on = pause_before(other, "open_run_of_task")
        with ThreadPoolExecutor(2) as threads:
            try:
                rescue = threads.submit(monitor.run_once, 1000.0 + 120)
                assert rescue_holds_the_task.wait(10)
                settle = threads.submit(node.finish_run, claim.run.id,
                                        RunResult(Outcome.SUCCEEDED, summary="done"),
                                        RetryPolicy(), 1000.0 + 120)
                # The settlement has ended the run and waits for the task the rescue holds.
                wait_for_lock_wait_or(settle.done, pg_url)
            finally:
                go_on.set()
            assert rescue.result(10)["rescued"] == 0
            settled = settle.result(10)
    assert settled.moved and settled.task.state is TaskState.COMPLETED
    assert settled.run.outcome is Outcome.SUCCEEDED
    assert settled.task.id == task.id

