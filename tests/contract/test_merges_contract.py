"""A completed task's merge in every store: the settle leaves it `merging` (no git in the
transaction), nothing its completion sets off happens before the merger records the merge,
one merge at a time holds a pool, and a task cancelled meanwhile stays cancelled."""

from __future__ import annotations

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import FollowUp, RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.chains import RoleFlow, Workflow

S = TaskState
NOW = 1000.0


def merging_task(store, title="feature", review=False):
    """A task of a git role whose run succeeded: its worktree branch is due to merge."""
    task = store.enqueue(NewTask(role="coder", title=title, review=review), NOW).task
    claim = store.claim(ClaimRequest("n1", NOW, 60, roles=["coder"]))
    store.record_worktree(task.id, repo="/repo", base="main", branch=f"taskherd/task-{task.id}",
                          path=f"/trees/task-{task.id}", merge_mode="merge-commit",
                          pool="git-main", now=NOW)
    store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0, summary="done"),
                     RetryPolicy(), NOW + 1)
    return store.get_task(task.id)


def test_the_settle_leaves_the_task_merging_and_its_chain_waits_for_the_merge(store):
    store.workflow = Workflow({"coder": RoleFlow(chain=(FollowUp("qa", "QA {parent_title}"),))})
    task = merging_task(store)
    assert task.state is S.MERGING and task.finished_at is None
    assert [t.id for t in store.list_tasks(limit=100)] == [task.id]  # no child yet
    [due] = store.merges_due()
    assert (due.task_id, due.state) == (task.id, "active")
    done = store.finish_merge(due, NOW + 5, commit="abc123")
    assert done.state is S.COMPLETED and done.finished_at == NOW + 5
    assert store.worktree_of(task.id).merged_commit == "abc123"
    assert [t.title for t in store.list_tasks(limit=100) if t.parent_id == task.id] == \
        ["QA feature"]
    assert store.merges_due() == []


def test_a_failed_merge_blocks_the_task_with_the_reason(store):
    task = merging_task(store)
    [due] = store.merges_due()
    blocked = store.finish_merge(due, NOW + 5, blocked="hook ran past merge_timeout",
                                 conflicts=())
    assert blocked.state is S.BLOCKED and blocked.reason == "hook ran past merge_timeout"
    assert store.worktree_of(task.id).state == "conflict"
    # A person unblocks it: the next run works in the same worktree, active again.
    assert store.unblock(task.id, NOW + 6).state is S.READY


def test_an_approved_review_waits_in_merging_too(store):
    task = merging_task(store, review=True)
    assert task.state is S.NEEDS_REVIEW and store.merges_due() == []
    assert store.approve(task.id, NOW + 2).state is S.MERGING
    assert [d.task_id for d in store.merges_due()] == [task.id]


def test_one_merge_holds_a_pool_and_a_restarted_node_resumes_its_own(store, reopen):
    first, second = merging_task(store, "one"), merging_task(store, "two")
    other = reopen()
    try:
        assert store.take_merge_pool("git-main", first.id, "n1", NOW, NOW - 400)
        assert not other.take_merge_pool("git-main", second.id, "n2", NOW, NOW - 400)
        assert not other.take_merge_pool("git-main", first.id, "n2", NOW, NOW - 400)
        # The same node after a restart takes its own merge back at once.
        assert other.take_merge_pool("git-main", first.id, "n1", NOW + 1, NOW - 400)
        # A holder silent past the stale mark (its node died) loses the pool.
        assert other.take_merge_pool("git-main", second.id, "n2", NOW + 500, NOW + 100)
        [due] = [d for d in store.merges_due() if d.task_id == second.id]
        store.finish_merge(due, NOW + 501, commit="c2")
        assert store.take_merge_pool("git-main", first.id, "n1", NOW + 502, NOW)
    finally:
        other.close()


def test_a_task_cancelled_while_merging_stays_cancelled(store):
    task = merging_task(store)
    [due] = store.merges_due()
    assert store.cancel(task.id, NOW + 2).state is S.CANCELLED
    # Its merge is not started any more, and one already under way changes nothing.
    assert not store.take_merge_pool("git-main", task.id, "n1", NOW + 3, NOW)
    assert store.finish_merge(due, NOW + 4, commit="abc") is None
    assert store.get_task(task.id).state is S.CANCELLED


def test_a_reviewers_verdict_counts_though_its_own_branch_waits_to_merge(store):
    """A reviewer with a worktree (it fixed a nit as it approved): its task waits in
    `merging`, and its APPROVED sends the reviewed task to its own merge meanwhile."""
    from taskherd.policy.chains import RoleFlow, Workflow

    store.workflow = Workflow({"coder": RoleFlow(review_by="qa"), "qa": RoleFlow()})
    task = merging_task(store)
    assert task.state is S.NEEDS_REVIEW
    [review] = [t for t in store.list_tasks(limit=100) if t.meta.get("review_of") == task.id]
    claim = store.claim(ClaimRequest("n1", NOW + 2, 60, roles=["qa"]))
    assert claim.task.id == review.id
    store.record_worktree(review.id, repo="/repo", base="main",
                          branch=f"taskherd/task-{review.id}", path=f"/trees/task-{review.id}",
                          merge_mode="merge-commit", pool="git-main", now=NOW + 2)
    store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED, 0, output_tail="APPROVED\n"),
                     RetryPolicy(), NOW + 3)
    assert store.get_task(review.id).state is S.MERGING
    assert store.get_task(task.id).state is S.MERGING
