"""Tasks: add and import them (with the role's policy applied), read them, move them by hand."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from taskherd import procs
from taskherd.model import NewTask, Run, Task, TaskState
from taskherd.ops import BadInput, Queue
from taskherd.store import Enqueued, StoreError, TransitionRefused
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
    """Cancel a task that has not finished."""
    return queue.store.cancel(task_id, now, reason)


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


def answer(queue: Queue, task_id: int, text: str, now: float) -> Run:
    """Type `text` (and Enter) into the standard input of the agent running task `task_id`,
    which waits at a question (its role sets on_input = "wait"). The text goes to the agent
    as bytes through its run's input channel; it is never read by a shell. Returns the run
    it reached; refused when the task has no running agent that takes answers."""
    data = _answer_bytes(text)
    task = queue.store.get_task(task_id)
    runs = [run for run in queue.store.runs_of_task(task_id) if run.ended_at is None]
    if task.state is not TaskState.RUNNING or not runs or runs[-1].log_path is None:
        raise TransitionRefused(task_id, "answer", task.state, {TaskState.RUNNING})
    run = runs[-1]
    role = queue.config.role(run.role)
    if role.on_input != "wait":
        raise StoreError(
            f"task {task_id}'s role {run.role} ends an agent that waits for input "
            f"(on_input = {role.on_input!r}); set on_input = \"wait\" to answer its agents")
    try:
        procs.send_input(run.log_path, data)
    except FileNotFoundError:
        raise StoreError(
            f"run {run.id} of task {task_id} has no input channel here (its node is "
            f"{run.node}: answer on that host)") from None
    except ProcessLookupError:
        raise StoreError(f"run {run.id} of task {task_id}: its agent is no longer "
                                "running") from None
    return run


def _answer_bytes(text: str) -> bytes:
    if not text.strip():
        raise BadInput("answer: empty; give the text to type, e.g. 'y'")
    if "\0" in text:
        raise BadInput("answer: contains a NUL character, which no terminal can type")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as error:  # argv bytes that were not UTF-8
        raise BadInput(f"answer: not valid UTF-8 (at character {error.start}); "
                       "give the text as UTF-8") from None
    if not data.endswith(b"\n"):
        data += b"\n"  # the Enter that ends a typed answer
    if len(data) > procs.PIPE_BUF:
        raise BadInput(f"answer: {len(data)} bytes; at most {procs.PIPE_BUF} (it is written "
                       "to the agent in one piece)")
    return data


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
