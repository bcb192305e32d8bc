"""Behaviour every store owes its callers: the state machine (docs/states.md), guarded transitions,
claim order, leases, retries and the dead-letter set."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, Priority, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import StoreError, TaskNotFound, TransitionRefused
from taskherd.store.errors import ReportRefused

POLICY = RetryPolicy()
LEASE = 60.0


def add(store, title="t", role="coder", now=1000.0, **fields):
    return store.enqueue(NewTask(role=role, title=title, **fields), now).task


def claim(store, now=1000.0, node="n1", **filters):
    return store.claim(ClaimRequest(node, now, LEASE, **filters))


def run_to_end(store, outcome, now=1000.0, **result):
    claimed = claim(store, now)
    store.mark_spawned(claimed.run.id, now, LEASE, pid=123, pid_started_at=1.0, log_path="l")
    return store.finish_run(claimed.run.id, RunResult(outcome, **result), POLICY, now + 1)


def test_claim_order_is_priority_then_fifo(store):
    low = add(store, "low", priority=Priority.P3)
    first = add(store, "first normal")
    urgent = add(store, "urgent", priority=Priority.P0)
    second = add(store, "second normal")
    order = [claim(store).task.id for _ in range(4)]
    assert order == [urgent.id, first.id, second.id, low.id]
    assert claim(store) is None


def test_run_after_hides_a_task_until_its_time(store):
    add(store, run_after=2000.0)
    assert claim(store, now=1999.0) is None
    assert claim(store, now=2000.0).task.title == "t"


def test_roles_filter_and_the_any_role(store):
    add(store, "for qa", role="qa")
    anyone = add(store, "for anyone", role="any")
    got = claim(store, roles=["coder"], as_role="coder")
    assert got.task.id == anyone.id and got.run.role == "coder"
    assert claim(store, roles=["coder"]) is None
    assert claim(store, roles=["qa"]).task.title == "for qa"


def test_full_pools_are_skipped(store):
    add(store, "needs gpu", pool="gpu")
    free = add(store, "no pool")
    assert claim(store, full_pools=["gpu"]).task.id == free.id
    assert claim(store, full_pools=["gpu"]) is None
    assert claim(store).task.title == "needs gpu"


def test_dedup_key_returns_the_open_task_until_it_finishes(store):
    first = store.enqueue(NewTask(role="coder", title="a", dedup_key="k"), 1.0)
    again = store.enqueue(NewTask(role="coder", title="b", dedup_key="k"), 2.0)
    assert first.created and not again.created and again.task.id == first.task.id
    store.cancel(first.task.id, 3.0)
    fresh = store.enqueue(NewTask(role="coder", title="c", dedup_key="k"), 4.0)
    assert fresh.created and fresh.task.id != first.task.id


def test_enqueue_many_counts_created_and_respects_dedup(store):
    batch = [NewTask(role="coder", title=f"t{i}", dedup_key=f"k{i % 3}") for i in range(6)]
    assert store.enqueue_many(batch, 1.0) == 3
    assert sum(c.count for c in store.counts()) == 3


def test_success_completes_and_records_the_run(store):
    add(store)
    finished = run_to_end(store, Outcome.SUCCEEDED, summary="done", cost_usd=0.25,
                          input_tokens=10, output_tokens=20, session_id="s1", exit_code=0)
    assert finished.moved
    assert finished.task.state is TaskState.COMPLETED and finished.task.finished_at == 1001.0
    assert finished.task.summary == "done"
    run = store.get_run(finished.run.id)
    assert (run.outcome, run.cost_usd, run.session_id, run.pid) == (
        Outcome.SUCCEEDED, 0.25, "s1", 123)
    assert store.open_runs() == []


def test_review_tasks_wait_for_approval_or_rejection(store):
    task = add(store, review=True)
    assert run_to_end(store, Outcome.SUCCEEDED).task.state is TaskState.NEEDS_REVIEW
    assert store.reject(task.id, 2000.0, "tests missing").state is TaskState.READY
    run_to_end(store, Outcome.SUCCEEDED, now=2001.0)
    assert store.approve(task.id, 3000.0).state is TaskState.COMPLETED


def test_failures_strike_and_back_off_exponentially(store):
    task = add(store, max_attempts=3)
    first = run_to_end(store, Outcome.FAILED, now=1000.0, error="boom")
    assert first.task.state is TaskState.READY and first.task.attempts == 1
    assert first.task.run_after == 1001.0 + 15
    assert claim(store, now=1015.0) is None
    second = run_to_end(store, Outcome.CRASHED, now=1016.0)
    assert second.task.run_after == 1017.0 + 30
    third = run_to_end(store, Outcome.TIMED_OUT, now=1047.0, error="timeout",
                       error_tail="last\nlines")
    dead = store.get_task(task.id)
    assert third.task.state is TaskState.DEAD and dead.attempts == 3
    assert (dead.last_error, dead.error_tail, dead.title) == ("timeout", "last\nlines", "t")
    assert "attempt 3 of 3" in dead.reason
    assert [r.attempt for r in store.runs_of_task(task.id)] == [1, 2, 3]


def test_requeue_revives_the_dead_with_a_fresh_budget(store):
    task = add(store, max_attempts=1)
    run_to_end(store, Outcome.STALLED)
    revived = store.requeue(task.id, 5000.0)
    assert revived.state is TaskState.READY and revived.attempts == 0
    assert revived.finished_at is None
    assert len(store.runs_of_task(task.id)) == 1  # history is kept


def test_rate_limits_do_not_strike_but_are_capped(store):
    task = add(store, max_attempts=1)
    now = 1000.0
    for expected in range(1, 5):
        finished = run_to_end(store, Outcome.RATE_LIMITED, now=now, retry_at=now + 100)
        assert finished.task.state is TaskState.READY and finished.task.attempts == 0
        assert finished.task.run_after == now + 1 and finished.task.rate_limits == expected
        now += 200
    fifth = run_to_end(store, Outcome.RATE_LIMITED, now=now)
    assert fifth.task.state is TaskState.DEAD and "rate-limited 5 times" in fifth.task.reason
    assert store.get_task(task.id).attempts == 0


def test_expired_leases_are_rescued_without_a_strike(store):
    task = add(store)
    claimed = claim(store, now=1000.0)
    assert store.rescue_expired(1000.0 + LEASE - 1, lambda role: POLICY) == []
    rescued = store.rescue_expired(1000.0 + LEASE + 1, lambda role: POLICY)
    assert [r.task.id for r in rescued] == [task.id]
    after = store.get_task(task.id)
    assert after.state is TaskState.READY and after.attempts == 0 and after.rescues == 1
    assert store.get_run(claimed.run.id).outcome is Outcome.LOST


def test_heartbeats_and_renewals_keep_the_lease(store):
    add(store)
    claimed = claim(store, now=1000.0)
    store.mark_spawned(claimed.run.id, 1000.0, LEASE, pid=1, pid_started_at=1.0, log_path=None)
    run = store.heartbeat(claimed.run.id, 1050.0, LEASE, progress="half way")
    assert run.progress == "half way" and run.heartbeat_at == 1050.0
    assert store.rescue_expired(1100.0, lambda role: POLICY) == []
    assert store.renew_leases("n1", 1100.0, LEASE) == 1
    assert store.rescue_expired(1150.0, lambda role: POLICY) == []
    assert store.get_task(claimed.task.id).state is TaskState.RUNNING


def test_a_heartbeat_renews_a_lease_past_half_and_keeps_it(store):
    """A heartbeat renews its task's lease once less than half of it is left (earlier the
    lease stands as it was: it is not rewritten for every heartbeat); an agent beating at a
    steady pace shorter than a lease keeps it, and an ended run's heartbeat is refused."""
    task = add(store)
    claimed = claim(store, now=1000.0)  # leased until 1060
    store.mark_spawned(claimed.run.id, 1000.0, LEASE, pid=1, pid_started_at=1.0, log_path=None)

    def lease():
        return store.get_task(task.id).lease_expires_at

    assert store.heartbeat(claimed.run.id, 1020.0, LEASE).heartbeat_at == 1020.0
    assert lease() == 1060.0  # 40 s of 60 left: as it was
    store.heartbeat(claimed.run.id, 1031.0, LEASE, progress="p")
    assert lease() == 1091.0  # 29 s left: renewed
    for at in (1080.0, 1130.0, 1175.0, 1220.0):  # beats 45-50 s apart, each within a lease
        store.heartbeat(claimed.run.id, at, LEASE)
        assert lease() >= at + LEASE / 2
        assert store.rescue_expired(at + LEASE / 2, lambda role: POLICY) == []
    store.finish_run(claimed.run.id, RunResult(Outcome.SUCCEEDED), POLICY, 1230.0)
    with pytest.raises(StoreError, match="already ended"):
        store.heartbeat(claimed.run.id, 1231.0, LEASE)


def test_due_leases_are_renewed_a_batch_at_a_time_oldest_first(store):
    for _ in range(4):
        add(store)
    first, second, third = (claim(store, now=at) for at in (1000.0, 1010.0, 1020.0))
    other = claim(store, now=1000.0, node="n2")  # another node's lease is its own to renew

    def lease(claimed):
        return store.get_task(claimed.task.id).lease_expires_at

    # A third of a lease on, only the first is due; a batch of one renews it alone.
    assert store.renew_due_leases("n1", 1025.0, LEASE, batch=1) == 1
    assert (lease(first), lease(second), lease(third)) == (1085.0, 1070.0, 1080.0)
    # Later: the second and third are due; a batch of one takes the older of them.
    assert store.renew_due_leases("n1", 1045.0, LEASE, batch=1) == 1
    assert (lease(second), lease(third)) == (1105.0, 1080.0)
    assert store.renew_due_leases("n1", 1045.0, LEASE, batch=10) == 1  # the third, only
    assert store.renew_due_leases("n1", 1045.0, LEASE, batch=10) == 0  # all fresh now
    assert lease(other) == 1060.0


def test_rescue_cap_sends_a_task_to_dead(store):
    task = add(store)
    policy = RetryPolicy(max_rescues=2)
    now = 1000.0
    for _ in range(3):
        claim(store, now=now)
        now += LEASE + 1
        store.rescue_expired(now, lambda role: policy)
    assert store.get_task(task.id).state is TaskState.DEAD


def test_finishing_a_cancelled_task_records_the_run_only(store):
    task = add(store)
    claimed = claim(store)
    store.cancel(task.id, 1001.0, "not needed")
    finished = store.finish_run(claimed.run.id, RunResult(Outcome.CANCELLED), POLICY, 1002.0)
    assert not finished.moved and finished.task.state is TaskState.CANCELLED
    assert store.get_run(claimed.run.id).outcome is Outcome.CANCELLED


def test_a_run_is_finished_once(store):
    add(store)
    claimed = claim(store)
    store.finish_run(claimed.run.id, RunResult(Outcome.SUCCEEDED), POLICY, 1001.0)
    with pytest.raises(StoreError, match="already ended"):
        store.finish_run(claimed.run.id, RunResult(Outcome.FAILED), POLICY, 1002.0)


def test_spawned_after_cancel_is_refused_but_recorded(store):
    task = add(store)
    claimed = claim(store)
    store.cancel(task.id, 1001.0)
    with pytest.raises(TransitionRefused):
        store.mark_spawned(claimed.run.id, 1002.0, LEASE, pid=99, pid_started_at=2.0, log_path="x")
    assert store.get_run(claimed.run.id).pid == 99  # the supervisor must still kill pid 99


@pytest.mark.parametrize(
    ("action", "start", "expected"),
    [
        ("approve", "pending", TaskState.READY),
        ("block", "ready", TaskState.BLOCKED),
        ("block", "pending", TaskState.BLOCKED),
        ("cancel", "pending", TaskState.CANCELLED),
        ("cancel", "ready", TaskState.CANCELLED),
    ],
)
def test_person_transitions(store, action, start, expected):
    task = add(store, pending=(start == "pending"))
    moved = getattr(store, action)(task.id, 2000.0)
    assert moved.state is expected
    assert (moved.finished_at is not None) == (expected is TaskState.CANCELLED)


def test_block_and_unblock(store):
    task = add(store)
    assert store.block(task.id, 2.0, "needs credentials").reason == "needs credentials"
    assert claim(store) is None
    assert store.unblock(task.id, 3.0).state is TaskState.READY


@pytest.mark.parametrize("action", ["approve", "reject", "unblock", "requeue"])
def test_wrong_state_is_refused_and_changes_nothing(store, action):
    task = add(store)
    with pytest.raises(TransitionRefused, match=f"cannot {action} task {task.id}: it is ready"):
        getattr(store, action)(task.id, 2.0)
    assert store.get_task(task.id) == task


def test_block_of_a_running_task_is_refused(store):
    task = add(store)
    claim(store)
    with pytest.raises(TransitionRefused):
        store.block(task.id, 2.0)


def test_unknown_task(store):
    with pytest.raises(TaskNotFound, match="no task with id 42"):
        store.cancel(42, 1.0)


def test_prune_deletes_old_finished_tasks_and_their_runs(store):
    old = add(store, "old")
    run_to_end(store, Outcome.SUCCEEDED, now=1000.0)
    young = add(store, "young", now=5000.0)
    assert store.prune(before=2000.0) == 1
    with pytest.raises(TaskNotFound):
        store.get_task(old.id)
    assert store.get_task(young.id).state is TaskState.READY
    assert store.runs_of_task(old.id) == []


def test_list_and_counts(store):
    add(store, "a", role="coder")
    add(store, "b", role="qa", priority=Priority.P0)
    assert [t.title for t in store.list_tasks()] == ["b", "a"]
    assert [t.title for t in store.list_tasks(role="coder")] == ["a"]
    assert {(c.state, c.role, c.count) for c in store.counts()} == {
        (TaskState.READY, "coder", 1), (TaskState.READY, "qa", 1)}


def test_an_agent_report_is_kept_on_its_open_run(store):
    add(store)
    claimed = claim(store)
    run = store.report(claimed.run.id, "done", 1001.0, summary="shipped")
    assert (run.report, run.report_summary, run.heartbeat_at) == ("done", "shipped", 1001.0)
    with pytest.raises(StoreError, match="'maybe' is not one of"):
        store.report(claimed.run.id, "maybe", 1002.0)


def test_the_first_report_of_a_run_stands(store):
    add(store)
    claimed = claim(store)
    store.report(claimed.run.id, "done", 1001.0, summary="shipped")
    # The same report again (an agent's retry) is answered with the run, as it was.
    again = store.report(claimed.run.id, "done", 1002.0, summary="shipped")
    assert (again.report, again.report_summary, again.heartbeat_at) == ("done", "shipped", 1001.0)
    for verdict, summary in (("fail", "it broke"), ("block", None), ("done", "other words")):
        with pytest.raises(ReportRefused, match="already reported 'done'"):
            store.report(claimed.run.id, verdict, 1003.0, summary=summary)
    run = store.get_run(claimed.run.id)
    assert (run.report, run.report_summary) == ("done", "shipped")


def test_cooldowns_take_the_later_reset_and_expire(store):
    store.set_cooldown("claude", 2000.0, "429", 1000.0)
    store.set_cooldown("claude", 1500.0, "429 again", 1001.0)
    [active] = store.active_cooldowns(1999.0)
    assert (active.runtime, active.until) == ("claude", 2000.0)
    assert store.active_cooldowns(2000.0) == []
    assert store.clear_cooldown("claude") and not store.clear_cooldown("claude")


def test_open_runs_of_cancelled_tasks_are_found_for_their_node(store):
    task = add(store)
    claimed = claim(store, node="n1")
    assert store.open_runs_of_final_tasks("n1") == []
    store.cancel(task.id, 1001.0)
    assert [r.id for r in store.open_runs_of_final_tasks("n1")] == [claimed.run.id]
    assert store.open_runs_of_final_tasks("n2") == []


def test_an_old_run_ending_after_cancel_and_requeue_leaves_the_new_run_in_charge(store):
    # Cancel, requeue and a new claim can all happen while the old agent is still being
    # killed: its end must neither settle the task nor be renewed, and it must be stopped.
    task = add(store)
    old = claim(store, node="n1")
    store.mark_spawned(old.run.id, 1000.0, LEASE, pid=1, pid_started_at=1.0, log_path="l")
    store.cancel(task.id, 1001.0)
    store.requeue(task.id, 1002.0)
    new = claim(store, now=1003.0, node="n1")
    store.mark_spawned(new.run.id, 1003.0, LEASE, pid=2, pid_started_at=2.0, log_path="l2")
    assert [r.id for r in store.open_runs_of_final_tasks("n1")] == [old.run.id]
    store.heartbeat(old.run.id, 1050.0, LEASE)
    assert store.get_task(task.id).lease_expires_at == 1003.0 + LEASE
    cancelled = RunResult(Outcome.CANCELLED, error="the task was cancelled")
    ended = store.finish_run(old.run.id, cancelled, POLICY, 1004.0)
    assert not ended.moved and ended.run.outcome is Outcome.CANCELLED
    assert store.get_task(task.id).state is TaskState.RUNNING
    done = store.finish_run(new.run.id, RunResult(Outcome.SUCCEEDED), POLICY, 1005.0)
    assert done.moved and done.task.state is TaskState.COMPLETED


def test_enqueue_many_keeps_each_task_whole_and_in_order(store):
    """A batch is added as its tasks one by one would be: claimed in the batch's order, each
    field kept, a child under its parent's root, the first of a dedup key twice alone."""
    parent = store.enqueue(NewTask(role="coder", title="parent"), 1.0).task
    batch = [NewTask(role="coder", title="first", pool="gpu", meta={"k": 1}, max_attempts=5),
             NewTask(role="coder", title="child", parent_id=parent.id, priority=Priority.P2),
             NewTask(role="coder", title="once", dedup_key="d"),
             NewTask(role="coder", title="once again", dedup_key="d"),
             NewTask(role="coder", title="last", review=True)]
    assert store.enqueue_many(batch, 2.0) == 4
    claimed = []
    while (claim := store.claim(ClaimRequest("n1", 3.0, 60.0))) is not None:
        claimed.append(claim.task)
    assert [t.title for t in claimed] == ["parent", "first", "child", "once", "last"]
    first, child, last = claimed[1], claimed[2], claimed[4]
    assert (first.pool, first.meta, first.max_attempts) == ("gpu", {"k": 1}, 5)
    assert (child.parent_id, child.root_id, child.depth) == (parent.id, parent.id, 1)
    assert last.review and first.created_at == 2.0


def test_enqueue_answers_the_task_as_stored(store):
    """The task an enqueue answers is the one a read of it gives, field for field: with every
    field given, with none, pending, a whole-second due time, a child, a chain. (The API's
    answer is written from it.)"""
    from taskherd.model.settings import FollowUp

    parent = add(store, "parent")
    news = [NewTask(role="coder", title="plain"),
            NewTask(role="coder", title="full", prompt="p\u00e9", priority=Priority.P0,
                    pool="gpu", dedup_key="k", max_attempts=5, review=True,
                    meta={"a": [1, 2.5, None], "due_at": 7, "t": "x"}),
            NewTask(role="coder", title="later", pending=True, run_after=5000),
            NewTask(role="coder", title="child", parent_id=parent.id),
            NewTask(role="coder", title="chained",
                    chain=(FollowUp(role="qa", title="check", prompt="look"),))]
    for new in news:
        added = store.enqueue(new, 1234.5).task
        stored = store.get_task(added.id)
        assert added == stored
