"""Tasks: add and import them (with the role's policy applied), read them, move them by hand."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from taskherd.model import NewTask, Run, Task, TaskState
from taskherd.ops import BadInput, Queue
from taskherd.store import Enqueued
from taskherd.taskspec import TaskSpecError, new_task_from

STATE_NAMES = tuple(state.value for state in TaskState)


def validate_task(queue: Queue, data: Mapping[str, Any], where: str = "") -> NewTask:
    """`data` (the fields of `taskherd task add` or one JSON line of an import) as a NewTask,
    with the role's policy filled in where the data is silent: max_attempts and review come
    from the role, and a role the config does not define is refused (when it defines any)."""
    try:
        return new_task_from(data, queue.config)
    except TaskSpecError as error:
        raise BadInput(f"{where}{error}") from error


def add_task(queue: Queue, data: Mapping[str, Any], now: float) -> Enqueued:
    """Add one task. An open task with the same dedup_key is returned instead
    (`Enqueued.created` is False then)."""
    return queue.store.enqueue(validate_task(queue, data), now)


def import_tasks(
    queue: Queue, items: Iterable[Mapping[str, Any]], now: float
) -> dict[str, Any]:
    """Add many tasks, all or nothing: every item is validated before any is written.
    Returns how many were read and how many created (the rest were open by dedup key)."""
    batch = [validate_task(queue, item, where=f"item {number}: ")
             for number, item in enumerate(items, start=1)]
    return _enqueue_batch(queue, batch, now)


def import_json_lines(queue: Queue, lines: Iterable[str], now: float) -> dict[str, Any]:
    """Add tasks from JSON Lines (one object a line; blank lines skipped), all or nothing.
    An error names its line."""
    batch = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise BadInput(f"line {number}: not valid JSON: {error.msg}") from error
        batch.append(validate_task(queue, data, where=f"line {number}: "))
    return _enqueue_batch(queue, batch, now)


def _enqueue_batch(queue: Queue, batch: list[NewTask], now: float) -> dict[str, Any]:
    created = queue.store.enqueue_many(batch, now) if batch else 0
    return {"read": len(batch), "created": created, "roles": sorted({new.role for new in batch})}


def get_task(queue: Queue, task_id: int) -> Task:
    return queue.store.get_task(task_id)


def list_tasks(queue: Queue, *, state: str | TaskState | None = None, role: str | None = None,
               limit: int = 100) -> list[Task]:
    """Tasks, open ones first, by priority, then FIFO."""
    if limit < 1:
        raise BadInput(f"limit = {limit!r}: expected a whole number ≥ 1")
    return queue.store.list_tasks(state=task_state(state), role=role, limit=limit)


def task_history(queue: Queue, *, since: float | None = None, role: str | None = None,
                 limit: int = 100) -> list[Task]:
    """Finished tasks, newest first (finished since `since`, when given)."""
    if limit < 1:
        raise BadInput(f"limit = {limit!r}: expected a whole number ≥ 1")
    start = float("-inf") if since is None else since
    return queue.store.task_history(since=start, role=role, limit=limit)


def runs_of_task(queue: Queue, task_id: int) -> list[Run]:
    """A task's runs, oldest first (the task must exist)."""
    queue.store.get_task(task_id)
    return queue.store.runs_of_task(task_id)


def cancel(queue: Queue, task_id: int, now: float, reason: str | None = None) -> Task:
    """Cancel this one task (not what its chain created below it)."""
    return queue.store.cancel(task_id, now, reason)


def cancel_tree(queue: Queue, task_id: int, now: float, reason: str | None = None) -> list[Task]:
    """Cancel a task and every open task its chain created below it (children, their
    children…), in one transaction; also the open ones below a task already finished."""
    return queue.store.cancel_tree(task_id, now, reason)


def tree(queue: Queue, task_id: int) -> dict[str, Any]:
    """The chain `task_id` belongs to, from its root: each task with its state, the outcome of
    its latest run and its children, nested."""
    tasks, runs = queue.store.tree(task_id)
    nodes = {}
    for task in tasks:
        run = runs.get(task.id)
        nodes[task.id] = {
            "id": task.id, "role": task.role, "title": task.title, "state": task.state.value,
            "outcome": run.outcome.value if run and run.outcome else None,
            "depth": task.depth, "parent_id": task.parent_id, "reason": task.reason,
            "strikes": task.attempts, "rejections": task.rejections,
            "summary": task.summary, "review_of": task.meta.get("review_of"),
            "children": [],
        }
    root = None
    for task in tasks:
        parent = nodes.get(task.parent_id) if task.parent_id is not None else None
        if parent is not None:
            parent["children"].append(nodes[task.id])
        elif root is None:
            root = nodes[task.id]
        else:  # its parent was pruned: shown under the root, where its chain began
            root["children"].append(nodes[task.id])
    assert root is not None
    return root


def gates_of_task(queue: Queue, task_id: int) -> list[Any]:
    """The quality gates run on the task's runs, oldest first."""
    return queue.store.gates_of_task(task_id)


def approve(queue: Queue, task_id: int, now: float) -> Task:
    """Approve a pending task (→ ready) or one under review (→ completed)."""
    return queue.store.approve(task_id, now)


def reject(queue: Queue, task_id: int, now: float, reason: str | None = None) -> Task:
    """Reject a task under review: it goes back to ready."""
    return queue.store.reject(task_id, now, reason)


def block(queue: Queue, task_id: int, now: float, reason: str | None = None) -> Task:
    """Hold a task for a person (pending, ready or under review)."""
    return queue.store.block(task_id, now, reason)


def unblock(queue: Queue, task_id: int, now: float) -> Task:
    """Release a blocked task back to ready."""
    return queue.store.unblock(task_id, now)


def requeue(queue: Queue, task_id: int, now: float) -> Task:
    """Revive a dead or cancelled task with a fresh retry budget."""
    return queue.store.requeue(task_id, now)


# The hand transitions by name, for a door that offers them all alike (the CLI's `task NAME`).
TRANSITIONS = {"cancel": cancel, "approve": approve, "reject": reject, "block": block,
               "unblock": unblock, "requeue": requeue}


def task_state(state: str | TaskState | None) -> TaskState | None:
    if state is None or isinstance(state, TaskState):
        return state
    try:
        return TaskState(state)
    except ValueError:
        raise BadInput(f"state = {state!r}: expected one of {', '.join(STATE_NAMES)}") from None
