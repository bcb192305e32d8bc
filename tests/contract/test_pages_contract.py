"""Reads the HTTP API pages through, on every store: newest-first pages by cursor, a task's
children, and the totals /metrics reports."""

from __future__ import annotations

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.queue import RetryPolicy


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
    claim = store.claim("n1", 1000.0, 60)
    store.record_reported_usage(claim.run.id, cost_usd=0.5, input_tokens=7, output_tokens=3)
    store.finish_run(claim.run.id, RunResult(Outcome.FAILED), RetryPolicy(), 1001.0)
    store.claim("n1", 1002.0, 60)
    totals = {(row["role"], row["outcome"]): row for row in store.run_totals()}
    assert totals[("coder", "failed")]["runs"] == 1
    assert totals[("coder", "failed")]["cost_usd"] == 0.5
    assert totals[("coder", None)]["runs"] == 1
    spent = store.spend_since(0.0)
    assert [(row["role"], row["runs"], row["cost_usd"]) for row in spent] == [("coder", 1, 0.5)]
