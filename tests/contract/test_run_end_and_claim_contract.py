"""A run's end and the node's next claim (Store.finish_run_and_claim), as the daemon makes
them when a run frees a slot: the end stands as finish_run's would, the claim is
attempt_claim's (within limits: the refusals on the way, then the next candidate), and a
listener hears what the two calls one after the other tell. PostgreSQL makes both in one
call; its round trips and faults are tests/integration/test_postgres_end_and_claim_call.py's."""

from __future__ import annotations

import asyncio

import pytest

from taskherd.model import Event, EventKind, NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import FollowUp, RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.limits import ClaimLimits, RoleLimit
from taskherd.store import RunNotFound

NOW = 1_700_000_000.0
LEASE = 60.0
LIMITS = ClaimLimits({"deployer": RoleLimit(max_concurrent=1), "coder": RoleLimit()})
ROLES = ["deployer", "coder"]
DONE = RunResult(Outcome.SUCCEEDED, summary="done")


def request(node="node-a", now=NOW + 1, **fields):
    return ClaimRequest(node, now, LEASE, roles=ROLES, limits=LIMITS,
                        runtime_of={role: "command" for role in ROLES}, **fields)


def add(store, role, title, **fields):
    return store.enqueue(NewTask(role=role, title=title, **fields), NOW).task


@pytest.fixture
def other(reopen):
    second = reopen()
    yield second
    second.close()


def test_the_run_ends_as_finish_run_ends_it_and_the_next_task_is_claimed(store):
    first, second = add(store, "coder", "fix 1"), add(store, "coder", "fix 2")
    running = store.claim(request(now=NOW))
    token = "run-credential-of-the-next-claim"
    finished, attempt = store.finish_run_and_claim(running.run.id, DONE, RetryPolicy(),
                                                   NOW + 1, request(credential=token))
    assert finished.moved
    assert finished.run == store.get_run(running.run.id)
    assert (finished.run.outcome, finished.run.ended_at) == (Outcome.SUCCEEDED, NOW + 1)
    assert finished.task == store.get_task(first.id)
    assert (finished.task.state, finished.task.summary) == (TaskState.COMPLETED, "done")
    claim = attempt.claim
    assert (claim.task.id, claim.task.state, claim.task.lease_node) == (
        second.id, TaskState.CLAIMED, "node-a")
    assert claim.task == store.get_task(second.id)
    assert claim.run == store.get_run(claim.run.id)
    assert (claim.run.node, claim.run.claimed_at) == ("node-a", NOW + 1)
    assert store.run_of_credential(token).id == claim.run.id
    assert attempt.refused == ()


def test_within_limits_the_refusals_come_back_and_the_next_candidate_is_claimed(store, other):
    add(store, "deployer", "deploy 1")
    add(store, "coder", "fix 1")
    add(store, "deployer", "deploy 2")
    fix = add(store, "coder", "fix 2")
    assert other.claim(request("node-b", now=NOW)).task.title == "deploy 1"
    running = store.claim(request(now=NOW))
    assert running.task.title == "fix 1"
    finished, attempt = store.finish_run_and_claim(running.run.id, DONE, RetryPolicy(),
                                                   NOW + 1, request())
    assert finished.task.state is TaskState.COMPLETED
    assert attempt.claim.task.id == fix.id  # deploy 2 waits for deploy 1's place
    [refused] = attempt.refused
    assert refused.role == "deployer"
    assert "max_concurrent 1 (1 running)" in refused.reason


def test_with_no_task_ready_the_run_still_ends(store):
    task = add(store, "coder", "fix")
    running = store.claim(request(now=NOW))
    finished, attempt = store.finish_run_and_claim(
        running.run.id, RunResult(Outcome.FAILED, exit_code=1, error="boom"), RetryPolicy(),
        NOW + 1, request())
    assert (attempt.claim, attempt.refused) == (None, ())
    assert finished.task == store.get_task(task.id)
    assert finished.task.state is TaskState.READY  # to be tried again, after its backoff
    assert finished.run.outcome is Outcome.FAILED


def test_a_run_end_that_sets_off_a_chain_is_made_and_then_the_claim(store):
    chained = add(store, "coder", "fix", chain=(FollowUp(role="qa", title="check {parent_title}"),))
    later = add(store, "coder", "fix later")
    running = store.claim(request(now=NOW))
    finished, attempt = store.finish_run_and_claim(running.run.id, DONE, RetryPolicy(),
                                                   NOW + 1, request())
    assert finished.task == store.get_task(chained.id)
    assert [child.title for child in store.children_of(chained.id)] == ["check fix"]
    assert attempt.claim.task.id == later.id


def test_a_run_end_the_store_refuses_raises_and_claims_nothing(store):
    waiting = add(store, "coder", "fix")
    with pytest.raises(RunNotFound):
        store.finish_run_and_claim(999_999, DONE, RetryPolicy(), NOW + 1, request())
    assert store.get_task(waiting.id).state is TaskState.READY
    assert store.open_runs() == []


def test_a_listener_hears_what_the_end_and_the_claim_tell_one_after_the_other(store):
    first, second = add(store, "coder", "fix 1"), add(store, "coder", "fix 2")
    running = store.claim(request(now=NOW))

    async def heard() -> tuple[list[Event], int]:
        async with store.listen() as events:
            _, attempt = await asyncio.to_thread(
                store.finish_run_and_claim, running.run.id, DONE, RetryPolicy(), NOW + 1,
                request())
            return [await asyncio.wait_for(anext(events), 20.0) for _ in range(3)], \
                attempt.claim.run.id

    told, claimed_run = asyncio.run(heard())
    assert told == [
        Event(EventKind.RUN_ENDED, NOW + 1, task_id=first.id, run_id=running.run.id,
              role="coder", runtime="command"),
        Event(EventKind.TASK_CHANGED, NOW + 1, task_id=first.id,
              state=TaskState.COMPLETED, role="coder"),
        Event(EventKind.TASK_CHANGED, NOW + 1, task_id=second.id, run_id=claimed_run,
              state=TaskState.CLAIMED, role="coder"),
    ]
