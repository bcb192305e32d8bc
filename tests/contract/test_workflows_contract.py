"""Workflows in every store: chains created in the settling transaction, the depth limit,
reviews and their verdicts, cancels that follow a chain, and a chain's tree."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, Priority, RunResult, TaskState
from taskherd.model.settings import FollowUp, RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.policy.chains import RoleFlow, Workflow, parse_chain
from taskherd.store import TransitionRefused

POLICY = RetryPolicy()
LEASE = 60.0
S = TaskState


def qa_after(role: str = "coder", **fields) -> dict:
    follow = FollowUp("qa", "QA: {parent_title}",
                      prompt="Check task {parent_id} ({parent_role}): {parent_summary}. "
                             "Log: {parent_log}", **fields)
    return {role: RoleFlow(chain=(follow,)), "qa": RoleFlow(max_attempts=2)}


def run_once(store, outcome, now, task_id=None, **result):
    claimed = store.claim(ClaimRequest("n1", now, LEASE))
    assert claimed is not None and (task_id is None or claimed.task.id == task_id)
    store.mark_spawned(claimed.run.id, now, LEASE, pid=1, pid_started_at=1.0,
                       log_path=f"/logs/run-{claimed.run.id}.log")
    return store.finish_run(claimed.run.id, RunResult(outcome, **result), POLICY, now + 1)


def children(store, task_id):
    return [t for t in store.list_tasks(limit=10_000) if t.parent_id == task_id]


def test_a_role_chain_creates_its_child_in_the_settle_with_templates(store):
    store.workflow = Workflow(qa_after())
    parent = store.enqueue(NewTask(role="coder", title="Fix login"), 1000.0).task
    finished = run_once(store, Outcome.SUCCEEDED, 1000.0, summary="fixed the redirect")
    assert finished.task.state is S.COMPLETED
    [child] = children(store, parent.id)
    assert child.state is S.READY and child.run_after == 1001.0
    assert child.title == "QA: Fix login"
    assert child.prompt == (f"Check task {parent.id} (coder): fixed the redirect. "
                            f"Log: /logs/run-{finished.run.id}.log")
    assert (child.root_id, child.depth, child.max_attempts) == (parent.id, 1, 2)
    assert store.claim(ClaimRequest("n1", 1001.0, LEASE)).task.id == child.id


def test_a_retried_failure_creates_nothing_and_the_dead_letter_fires_on_failure(store):
    fallback = FollowUp("ops", "Investigate {parent_title}", on="failure")
    store.workflow = Workflow({"coder": RoleFlow(chain=(
        FollowUp("qa", "QA {parent_title}"), fallback))})
    parent = store.enqueue(NewTask(role="coder", title="deploy", max_attempts=2), 1000.0).task
    run_once(store, Outcome.FAILED, 1000.0, error="boom")
    assert children(store, parent.id) == []  # a retry is coming: failures don't cascade early
    finished = run_once(store, Outcome.FAILED, 5000.0, error="boom again")
    assert finished.task.state is S.DEAD
    assert [c.title for c in children(store, parent.id)] == ["Investigate deploy"]


def test_complete_when_and_delay(store):
    chain = parse_chain([
        {"role": "alert", "title": "page", "on": "complete", "when": "contains:ALERT"},
        {"role": "alert", "title": "regex", "on": "complete", "when": "regex:^disk \\d+%$"},
        {"role": "later", "title": "in ten minutes", "on": "complete", "delay": "10m"},
    ], "chain")
    quiet = store.enqueue(NewTask(role="watch", title="quiet", chain=chain), 1000.0).task
    run_once(store, Outcome.SUCCEEDED, 1000.0, summary="all good")
    assert [c.title for c in children(store, quiet.id)] == ["in ten minutes"]
    delayed = children(store, quiet.id)[0]
    assert delayed.run_after == 1001.0 + 600
    loud = store.enqueue(NewTask(role="watch", title="loud", chain=chain, max_attempts=1),
                         1000.0).task
    run_once(store, Outcome.FAILED, 1002.0, task_id=loud.id, error="ALERT: disk",
             output_tail="checking\ndisk 97%\n")
    assert sorted(c.title for c in children(store, loud.id)) == ["in ten minutes", "page",
                                                                  "regex"]
    # The delayed child waits in ready, invisible to claims until its time.
    assert store.claim(ClaimRequest("n1", 1003.0, LEASE, roles=["later"])) is None
    assert store.claim(ClaimRequest("n1", 1001.0 + 600, LEASE, roles=["later"])) is not None


def test_the_role_chain_applies_whatever_the_task_declares(store):
    store.workflow = Workflow(qa_after())
    mine = parse_chain([{"role": "docs", "title": "Document {parent_title}"}], "chain")
    parent = store.enqueue(NewTask(role="coder", title="api", chain=mine), 1000.0).task
    run_once(store, Outcome.SUCCEEDED, 1000.0)
    assert sorted(c.role for c in children(store, parent.id)) == ["docs", "qa"]


def test_the_depth_limit_stops_a_chain_with_its_reason_on_the_parent(store):
    loop = FollowUp("coder", "again {parent_id}")
    store.workflow = Workflow({"coder": RoleFlow(chain=(loop,))}, max_depth=2)
    store.enqueue(NewTask(role="coder", title="start"), 1000.0)
    for step in range(3):
        run_once(store, Outcome.SUCCEEDED, 1000.0 + 10 * step)
    tasks = store.list_tasks()
    assert [t.depth for t in sorted(tasks, key=lambda t: t.id)] == [0, 1, 2]
    deepest = max(tasks, key=lambda t: t.depth)
    assert deepest.state is S.COMPLETED
    assert "beyond max_depth 2" in deepest.reason
    assert store.claim(ClaimRequest("n1", 2000.0, LEASE)) is None


def test_a_fan_out_of_a_thousand_children_settles_in_one_transaction(store):
    chain = tuple(FollowUp("worker", f"part {i} of {{parent_title}}") for i in range(1000))
    parent = store.enqueue(NewTask(role="split", title="the job", chain=chain), 1000.0).task
    run_once(store, Outcome.SUCCEEDED, 1000.0)
    made = children(store, parent.id)
    assert len(made) == 1000 and {c.depth for c in made} == {1}
    assert made[0].title == "part 0 of the job"


def test_cancel_follows_the_chain_down_unless_only(store):
    store.workflow = Workflow(qa_after("coder") | {"qa": RoleFlow(chain=(
        FollowUp("docs", "docs {parent_id}", delay=3600),))})
    root = store.enqueue(NewTask(role="coder", title="root"), 1000.0).task
    run_once(store, Outcome.SUCCEEDED, 1000.0)
    [qa] = children(store, root.id)
    run_once(store, Outcome.SUCCEEDED, 1010.0, task_id=qa.id)
    [docs] = children(store, qa.id)
    # The root is completed, but the open task below it is still part of its chain.
    cancelled = store.cancel_tree(root.id, 1020.0, "not needed")
    assert [t.id for t in cancelled] == [docs.id]
    assert store.get_task(docs.id).state is S.CANCELLED
    with pytest.raises(TransitionRefused):
        store.cancel_tree(root.id, 1021.0)
    other = store.enqueue(NewTask(role="coder", title="other"), 1030.0).task
    child = store.enqueue(NewTask(role="qa", title="kid", parent_id=other.id), 1030.0).task
    assert store.cancel(other.id, 1031.0).state is S.CANCELLED  # --only
    assert store.get_task(child.id).state is S.READY
    assert [t.id for t in store.cancel_tree(child.id, 1032.0)] == [child.id]


def test_a_pruned_parent_leaves_its_child_runnable(store):
    store.workflow = Workflow(qa_after())
    parent = store.enqueue(NewTask(role="coder", title="old"), 1000.0).task
    run_once(store, Outcome.SUCCEEDED, 1000.0)
    store.prune(before=2000.0)
    [child] = [t for t in store.list_tasks() if t.role == "qa"]
    assert child.parent_id is None and child.root_id == parent.id
    assert run_once(store, Outcome.SUCCEEDED, 3000.0).task.state is S.COMPLETED


def test_tree_lists_a_chain_with_states_and_last_runs(store):
    store.workflow = Workflow(qa_after())
    root = store.enqueue(NewTask(role="coder", title="root"), 1000.0).task
    run_once(store, Outcome.SUCCEEDED, 1000.0)
    [qa] = children(store, root.id)
    tasks, runs = store.tree(qa.id)
    assert [(t.id, t.state) for t in tasks] == [(root.id, S.COMPLETED), (qa.id, S.READY)]
    assert runs[root.id].outcome is Outcome.SUCCEEDED and qa.id not in runs


# -- reviews -------------------------------------------------------------------------


def reviewed(store, max_reviews=3):
    store.workflow = Workflow({
        "coder": RoleFlow(review_by="qa", max_reviews=max_reviews,
                          chain=(FollowUp("deploy", "ship {parent_title}"),)),
        "qa": RoleFlow(max_attempts=2)})
    return store.enqueue(NewTask(role="coder", title="feature", prompt="build it"), 1000.0).task


def review_of(store, task_id):
    return [t for t in children(store, task_id) if t.meta.get("review_of") == task_id]


def test_review_by_sends_success_to_review_and_approval_fires_the_chain(store):
    task = reviewed(store)
    finished = run_once(store, Outcome.SUCCEEDED, 1000.0, summary="built it")
    assert finished.task.state is S.NEEDS_REVIEW
    [review] = review_of(store, task.id)
    assert review.role == "qa" and "built it" in review.prompt
    assert f"/logs/run-{finished.run.id}.log" in review.prompt
    run_once(store, Outcome.SUCCEEDED, 1010.0, task_id=review.id,
             output_tail="looks right\nAPPROVED\n")
    assert store.get_task(task.id).state is S.COMPLETED
    assert [c.role for c in children(store, task.id) if c.id != review.id] == ["deploy"]


def test_rejection_sends_the_task_back_with_the_reason_and_the_cap_blocks_it(store):
    task = reviewed(store, max_reviews=2)
    run_once(store, Outcome.SUCCEEDED, 1000.0)
    [first] = review_of(store, task.id)
    run_once(store, Outcome.SUCCEEDED, 1010.0, task_id=first.id,
             summary="REJECTED: the tests do not cover logout")
    back = store.get_task(task.id)
    assert back.state is S.READY and back.rejections == 1
    assert back.reason == "the tests do not cover logout"
    run_once(store, Outcome.SUCCEEDED, 1020.0, task_id=task.id)
    second = [r for r in review_of(store, task.id) if r.id != first.id]
    assert len(second) == 1 and second[0].state is S.READY
    store.review_verdict(second[0].id, "reject", "still no logout test", 1030.0)
    blocked = store.get_task(task.id)
    assert blocked.state is S.BLOCKED and "max_reviews 2" in blocked.reason
    assert "still no logout test" in blocked.reason
    assert store.get_task(second[0].id).state is S.READY  # its agent still reports done


def test_a_review_without_a_verdict_is_a_failure_and_a_person_may_decide(store):
    task = reviewed(store)
    run_once(store, Outcome.SUCCEEDED, 1000.0)
    [review] = review_of(store, task.id)
    finished = run_once(store, Outcome.SUCCEEDED, 1010.0, task_id=review.id, summary="hmm")
    assert finished.run.outcome is Outcome.FAILED
    assert store.get_task(review.id).attempts == 1
    assert "without a verdict" in store.get_task(review.id).last_error
    assert store.get_task(task.id).state is S.NEEDS_REVIEW
    store.approve(task.id, 1020.0)  # a person decides: the pending review has nothing to do
    assert store.get_task(review.id).state is S.CANCELLED
    assert store.get_task(task.id).state is S.COMPLETED


def test_a_task_added_without_review_is_still_reviewed_when_its_role_says(store):
    task = reviewed(store)
    assert task.review is False
    assert run_once(store, Outcome.SUCCEEDED, 1000.0).task.state is S.NEEDS_REVIEW


def test_priority_of_a_review_follows_its_task(store):
    store.workflow = Workflow({"coder": RoleFlow(review_by="qa")})
    task = store.enqueue(NewTask(role="coder", title="hot", priority=Priority.P0), 1.0).task
    run_once(store, Outcome.SUCCEEDED, 1.0)
    assert review_of(store, task.id)[0].priority is Priority.P0
