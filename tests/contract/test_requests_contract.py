"""Agent requests noted with what they made, on every store: in the transaction that made it
(a refused addition notes nothing, so its second try is judged afresh), and gone with the
run when it is pruned."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store.errors import SpawnAllowance, SpawnLimitReached
from taskherd.store.memory import NewMemory
from taskherd.store.requests import RequestKey

LEASE = 60.0


def started_run(store, now: float = 1000.0):
    task = store.enqueue(NewTask(role="coder", title="parent"), now).task
    claimed = store.claim(ClaimRequest("n1", now, LEASE))
    store.mark_spawned(claimed.run.id, now, LEASE, pid=123, pid_started_at=1.0, log_path="l")
    return task, claimed.run


def test_a_request_is_noted_with_what_it_made_and_only_if_it_made_it(store):
    task, run = started_run(store)
    key = RequestKey(run.id, "add-1")
    assert store.request_made(key) is None
    child = NewTask(role="qa", title="child", parent_id=task.id)
    with pytest.raises(SpawnLimitReached):
        store.enqueue(child, 1001.0, SpawnAllowance(task.id, run.claimed_at, 0), once=key)
    assert store.request_made(key) is None  # rolled back whole: nothing made, nothing noted
    added = store.enqueue(child, 1001.0, SpawnAllowance(task.id, run.claimed_at, 1), once=key)
    assert store.request_made(key) == {"task": added.task.id, "created": True}
    [memory] = store.add_memories([NewMemory("coder", "a lesson", "agent")], 1001.0,
                                  once=RequestKey(run.id, "mem-1"))
    assert store.request_made(RequestKey(run.id, "mem-1")) == {"memories": [memory.id]}
    assert store.request_made(RequestKey(run.id + 1, "add-1")) is None  # per run


def test_pruning_a_run_takes_its_requests(store):
    task, run = started_run(store)
    key = RequestKey(run.id, "add-1")
    child = store.enqueue(NewTask(role="qa", title="child", parent_id=task.id, pending=True),
                          1001.0, once=key).task
    store.cancel(child.id, 1001.0)  # finished too, so that both are pruned
    store.finish_run(run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), 1002.0)
    assert store.prune(before=5000.0) == 2
    assert store.request_made(key) is None
