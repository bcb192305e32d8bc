"""Lists of tasks by any filter, and a person's change of priority, on every store."""

from __future__ import annotations

import pytest

from taskherd.model import NewTask, Outcome, RunResult, TaskState
from taskherd.model.settings import RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.store import TransitionRefused
from taskherd.store.task_lists import TaskFilter

NOW = 1000.0


def test_every_filter_narrows_and_every_sort_orders(store):
    def add(**fields) -> int:
        return store.enqueue(NewTask(**({"role": "coder", "title": "t"} | fields)), NOW).task.id

    plain = add(title="plain", priority=2)
    urgent = add(title="Fix the 100%_done bar", priority=0, role="qa", max_attempts=1)
    prompt = add(title="other", prompt="see the Widget", priority=1)
    ran = store.claim(ClaimRequest("node-a", NOW, 60, roles=["qa"]))
    store.finish_run(ran.run.id, RunResult(Outcome.FAILED), RetryPolicy(), NOW + 5)
    cancelled = add(title="gone")
    store.cancel(cancelled, NOW + 10)

    def ids(sort: str = "newest", **wanted) -> list[int]:
        return [t.id for t in store.filter_tasks(TaskFilter(**wanted), sort=sort)]

    assert ids() == [cancelled, prompt, urgent, plain]
    assert ids("oldest") == [plain, urgent, prompt, cancelled]
    assert ids("priority") == [urgent, prompt, plain, cancelled]
    assert ids(state=TaskState.READY) == [prompt, plain]
    assert ids(state=TaskState.DEAD) == [urgent]
    assert ids(role="qa") == [urgent] and ids(priority=1) == [prompt]
    assert ids(node="node-a") == [urgent] and ids(node="node-b") == []
    assert ids(text="widget") == [prompt]  # the prompt, any case
    assert ids(text="100%_done") == [urgent] and ids(text="100%xdone") == []  # literal % _
    assert ids(text=f"#{plain}") == [plain]  # that task, by its key
    assert ids(text=f"#{plain}", state=TaskState.DEAD) == []
    assert ids(text=f"#{urgent}", state=TaskState.DEAD) == [urgent]
    assert ids(text=str(prompt)) == [prompt]  # a number is also its task's id
    assert ids(state=TaskState.CANCELLED, finished_from=NOW + 10, finished_to=NOW + 11) \
        == [cancelled]
    assert ids(finished_from=NOW + 11) == []
    assert [t.id for t in store.filter_tasks(TaskFilter(), limit=2, offset=1)] == [prompt,
                                                                                   urgent]
    assert store.count_filtered_tasks(TaskFilter(), 100) == 4
    assert store.count_filtered_tasks(TaskFilter(), 3) == 3  # counted up to the cap only
    assert store.count_filtered_tasks(TaskFilter(state=TaskState.READY, role="qa"), 100) == 0


def test_a_person_changes_an_open_tasks_priority_and_it_is_claimed_in_its_new_place(store):
    first = store.enqueue(NewTask(role="coder", title="first", priority=2), NOW).task
    later = store.enqueue(NewTask(role="coder", title="later", priority=2), NOW).task
    moved = store.set_priority(later.id, 0, NOW + 1)
    assert moved.priority == 0 and moved.updated_at == NOW + 1
    assert store.claim(ClaimRequest("n1", NOW + 2, 60)).task.id == later.id
    store.cancel(first.id, NOW + 3)
    with pytest.raises(TransitionRefused, match="it is cancelled"):
        store.set_priority(first.id, 0, NOW + 4)
    assert store.get_task(first.id).priority == 2
