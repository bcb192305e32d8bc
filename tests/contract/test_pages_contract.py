"""Reads the HTTP API pages through, on every store: newest-first pages by cursor, a task's
children, and the totals /metrics reports."""

from __future__ import annotations

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from tests.integration.test_hot_statements import statements_of


def test_pages_walk_newest_first_by_cursor_with_filters(store):
    ids = [store.enqueue(NewTask(role="qa" if n % 2 else "coder", title=f"t{n}"), 1000.0
                         ).task.id for n in range(7)]
    first = store.page_tasks(role="qa", limit=2)
    second = store.page_tasks(role="qa", before_id=first[-1].id, limit=2)
    qa = [i for n, i in enumerate(ids) if n % 2]
    assert [t.id for t in first + second] == sorted(qa, reverse=True)[:4]
    assert store.page_tasks(state=TaskState.DEAD) == []


def test_children_and_run_totals(store):
    parent = store.enqueue(NewTask(role="coder", title="p"), 1000.0).task
    kids = [store.enqueue(NewTask(role="coder", title=f"k{n}", parent_id=parent.id), 1000.0
                          ).task.id for n in range(3)]
    assert [t.id for t in store.children_of(parent.id)] == kids
    assert store.children_of(kids[0]) == []
    claim = store.claim(ClaimRequest("n1", 1000.0, 60))
    store.record_reported_usage(claim.run.id, cost_usd=0.5, input_tokens=7, output_tokens=3)
    store.finish_run(claim.run.id, RunResult(Outcome.FAILED), RetryPolicy(), 1001.0)
    store.claim(ClaimRequest("n1", 1002.0, 60))
    totals = {(row["role"], row["outcome"]): row for row in store.run_totals()}
    assert totals[("coder", "failed")]["runs"] == 1
    assert totals[("coder", "failed")]["cost_usd"] == 0.5
    assert totals[("coder", None)]["runs"] == 1
    spent = store.spend_since(0.0)
    assert [(row["role"], row["runs"], row["cost_usd"]) for row in spent] == [("coder", 1, 0.5)]



def test_run_totals_keep_what_pruning_deletes_and_count_open_runs_apart(store):
    """/metrics' counters are these totals: a prune that deletes ended runs must not lower
    them (it lowered every one of them), and an open run is counted apart, not as an
    outcome."""
    def ended(role: str, outcome: Outcome, now: float, cost: float, tokens: int) -> None:
        store.enqueue(NewTask(role=role, title=f"{role} {now}", max_attempts=1), now)
        claim = store.claim(ClaimRequest("n1", now, 60, roles=[role]))
        store.finish_run(claim.run.id, RunResult(outcome, cost_usd=cost, input_tokens=tokens,
                                                 output_tokens=1), RetryPolicy(), now + 1)

    def totals() -> dict:
        return {(row["role"], row["outcome"]): (row["runs"], round(row["cost_usd"], 6),
                                                row["input_tokens"], row["output_tokens"])
                for row in store.run_totals()}

    ended("coder", Outcome.SUCCEEDED, 1000.0, 0.5, 10)
    ended("coder", Outcome.FAILED, 1010.0, 0.25, 20)
    ended("qa", Outcome.SUCCEEDED, 1020.0, 1.0, 30)
    store.enqueue(NewTask(role="coder", title="still running"), 1030.0)
    store.claim(ClaimRequest("n1", 1030.0, 60, roles=["coder"]))
    before = totals()
    assert before[("coder", None)][0] == 1

    assert store.prune(before=1015.0) == 2  # the two coder tasks, with their runs
    assert totals() == before
    assert store.prune(before=5000.0) == 1  # the qa task; the running one is kept
    assert totals() == before
    ended("coder", Outcome.SUCCEEDED, 6000.0, 2.0, 40)  # added to what was pruned
    assert totals()[("coder", "succeeded")] == (2, 2.5, 50, 2)
    assert store.prune(before=9000.0) == 1
    assert totals()[("coder", "succeeded")] == (2, 2.5, 50, 2)
    assert totals()[("coder", "failed")] == before[("coder", "failed")]
    assert totals()[("qa", "succeeded")] == before[("qa", "succeeded")]


def _one_task_in_each_state(store) -> dict[TaskState, list[int]]:
    """Two tasks in each state a person can filter by, over a history of finished ones."""
    made: dict[TaskState, list[int]] = {state: [] for state in TaskState
                                        if state is not TaskState.NEEDS_REVIEW}
    now = 1000.0
    for n in range(2):
        made[TaskState.PENDING].append(store.enqueue(NewTask(
            role="coder", title=f"ask {n}", pending=True), now).task.id)
        for final in (TaskState.COMPLETED, TaskState.DEAD, TaskState.CANCELLED):
            task = store.enqueue(NewTask(role="coder", title=f"{final.value} {n}",
                                         max_attempts=1), now).task
            if final is TaskState.CANCELLED:
                store.cancel(task.id, now)
            else:
                claim = store.claim(ClaimRequest("n1", now, 60))
                assert claim.task.id == task.id
                outcome = Outcome.SUCCEEDED if final is TaskState.COMPLETED else Outcome.FAILED
                store.finish_run(claim.run.id, RunResult(outcome), RetryPolicy(), now + n)
            made[final].append(task.id)
        for leased in (TaskState.CLAIMED, TaskState.RUNNING):
            task = store.enqueue(NewTask(role="qa", title=f"{leased.value} {n}"), now).task
            claim = store.claim(ClaimRequest("n1", now, 60, roles=["qa"]))
            if leased is TaskState.RUNNING:
                store.mark_spawned(claim.run.id, now, 60, pid=None, pid_started_at=None,
                                   log_path=None)
            made[leased].append(task.id)
        blocked = store.enqueue(NewTask(role="writer", title=f"blocked {n}"), now).task
        store.block(blocked.id, now)
        made[TaskState.BLOCKED].append(blocked.id)
        # Done, with a worktree branch to merge: it waits in `merging` for the merger.
        merging = store.enqueue(NewTask(role="git", title=f"merging {n}"), now).task
        claim = store.claim(ClaimRequest("n1", now, 60, roles=["git"]))
        store.record_worktree(merging.id, repo="/nowhere", base="main",
                              branch=f"taskherd/task-{merging.id}", path="/nowhere/tree",
                              merge_mode="merge-commit", pool="git-main", now=now)
        store.finish_run(claim.run.id, RunResult(Outcome.SUCCEEDED), RetryPolicy(), now)
        made[TaskState.MERGING].append(merging.id)
        made[TaskState.READY].append(store.enqueue(NewTask(
            role="coder", title=f"ready {n}", priority=3 - n), now).task.id)
    return made


def test_a_state_filter_finds_exactly_its_tasks_and_pages_them(store):
    made = _one_task_in_each_state(store)
    for state, ids in made.items():
        listed = store.list_tasks(state=state)
        assert sorted(t.id for t in listed) == sorted(ids), state
        assert all(t.state is state for t in listed)
        first = store.page_tasks(state=state, limit=1)
        second = store.page_tasks(state=state, before_id=first[0].id, limit=1)
        assert [t.id for t in first + second] == sorted(ids, reverse=True), state
        assert store.list_tasks(state=state, role="nobody") == []
    # Open tasks by priority then id; finished ones the most recently finished first.
    assert [t.id for t in store.list_tasks(state=TaskState.READY)] == made[TaskState.READY][::-1]
    assert [t.id for t in store.list_tasks(state=TaskState.COMPLETED)] == \
        made[TaskState.COMPLETED][::-1]


def test_a_state_filter_reads_an_index_not_the_history(tmp_path):
    """`task list --state S` and `GET /v1/tasks?state=S` read the whole table otherwise: a
    second or more at a million tasks kept as history. (SQLite's plans: PostgreSQL plans by
    its statistics.) A finished state's page walks the primary key down, newest first,
    through a history made mostly of finished tasks."""
    from taskherd.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "plans.db", durability="normal")
    _one_task_in_each_state(store)

    def plans(read) -> list[list[str]]:
        return [[row[3] for row in store._conn.execute("EXPLAIN QUERY PLAN " + sql)]
                for sql in statements_of(store, read) if sql.upper().startswith("SELECT")]

    # plans() calls its lambda at once, inside this turn of the loop (B023 cannot know).
    for state in TaskState:
        reads = plans(lambda: store.list_tasks(state=state, limit=5))  # noqa: B023
        if state not in (TaskState.COMPLETED, TaskState.DEAD, TaskState.CANCELLED):
            reads += plans(lambda: store.page_tasks(state=state, before_id=10**9,  # noqa: B023
                                                    limit=5))
        assert reads and all("SCAN tasks" not in plan for plan in reads), (state, reads)
    store.close()
