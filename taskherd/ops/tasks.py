"""Tasks: add and import them (with the role's policy applied), read them, move them by hand."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from taskherd.model import NewTask, Run, Task, TaskState
from taskherd.ops import BadInput, Queue
from taskherd.policy.costs import is_unpriced
from taskherd.policy.taskspec import TaskSpecError, new_task_from
from taskherd.store import Enqueued, StoreError, TransitionRefused

STATE_NAMES = tuple(state.value for state in TaskState)


def validate_task(queue: Queue, data: Mapping[str, Any], where: str = "") -> NewTask:
    """`data` (the fields of `taskherd task add` or one JSON line of an import) as a NewTask,
    with the role's policy filled in where the data is silent: max_attempts and review come
    from the role, and a role the config does not define is refused (when it defines any)."""
    try:
        return new_task_from(data, queue.config)
    except TaskSpecError as error:
        raise BadInput(f"{where}{error}") from error


def add_task(queue: Queue, data: Mapping[str, Any], now: float,
             allowed_roles: Collection[str] | None = None) -> Enqueued:
    """Add one task. An open task with the same dedup_key is returned instead
    (`Enqueued.created` is False then). `allowed_roles`: the roles the caller may add tasks
    for (an intake token's list), None for any."""
    new = validate_task(queue, data)
    _check_roles([new], allowed_roles)
    return queue.store.enqueue(new, now)


def import_tasks(
    queue: Queue, items: Iterable[Mapping[str, Any]], now: float,
    allowed_roles: Collection[str] | None = None,
) -> dict[str, Any]:
    """Add many tasks, all or nothing: every item is validated before any is written.
    Returns how many were read and how many created (the rest were open by dedup key)."""
    batch = [validate_task(queue, item, where=f"item {number}: ")
             for number, item in enumerate(items, start=1)]
    _check_roles(batch, allowed_roles)
    return _enqueue_batch(queue, batch, now)


def _check_roles(batch: list[NewTask], allowed: Collection[str] | None) -> None:
    refused = sorted({new.role for new in batch} - set(allowed)) if allowed is not None else []
    if refused:
        from taskherd.ops.tokens import Forbidden  # the token machinery, for a refusal only

        raise Forbidden(f"this token may add tasks for roles {', '.join(sorted(allowed or ()))} "
                        f"only, not {refused[0]!r}")


class LinesRefused(BadInput):
    """Lines of an import that are wrong, each said with its number (`errors`); the message
    is the first of them and how many more there are."""

    def __init__(self, errors: list[str]):
        more = f" (and {len(errors) - 1} more wrong lines)" if len(errors) > 1 else ""
        super().__init__(errors[0] + more)
        self.errors = errors


def import_json_lines(queue: Queue, lines: Iterable[str], now: float,
                      allowed_roles: Collection[str] | None = None) -> dict[str, Any]:
    """Add tasks from JSON Lines (one object a line; blank lines skipped), all or nothing.
    Every line is checked before any is added: LinesRefused names each wrong one."""
    batch, errors = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            batch.append(validate_task(queue, json.loads(line), where=f"line {number}: "))
        except json.JSONDecodeError as error:
            errors.append(f"line {number}: not valid JSON: {error.msg}")
        except BadInput as error:
            errors.append(str(error))
    if errors:
        raise LinesRefused(errors)
    _check_roles(batch, allowed_roles)
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
    nodes: dict[int, dict[str, Any]] = {}
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
    root: dict[str, Any] | None = None
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


def set_priority(queue: Queue, task_id: int, priority: object, now: float) -> Task:
    """Give an open task another priority (0 is the most urgent): a ready one takes its
    place in the claim order at once."""
    if isinstance(priority, bool) or priority not in (0, 1, 2, 3):
        raise BadInput(f"priority = {priority!r}: expected 0, 1, 2 or 3 (P0 is the most urgent)")
    return queue.store.set_priority(task_id, int(priority), now)


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
    assert run.log_path is not None  # checked with the task's state above
    from taskherd.host import procs  # asyncio and psutil: not for `task add`, run by scripts

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
    from taskherd.host import procs

    if len(data) > procs.PIPE_BUF:
        raise BadInput(f"answer: {len(data)} bytes; at most {procs.PIPE_BUF} (it is written "
                       "to the agent in one piece)")
    return data


# The hand transitions by name, for a door that offers them all alike (the CLI's `task NAME`).
TRANSITIONS: dict[str, Callable[..., Task]] = {
    "cancel": cancel, "approve": approve, "reject": reject, "block": block, "unblock": unblock,
    "requeue": requeue}


def task_state(state: str | TaskState | None) -> TaskState | None:
    if state is None or isinstance(state, TaskState):
        return state
    try:
        return TaskState(state)
    except ValueError:
        raise BadInput(f"state = {state!r}: expected one of {', '.join(STATE_NAMES)}") from None


MAX_PAGE = 1000


def page_tasks(queue: Queue, *, state: str | TaskState | None = None, role: str | None = None,
               cursor: int | None = None, limit: int = 100) -> dict[str, Any]:
    """A page of tasks, newest first, and the cursor of the next page (None after the last).
    `cursor` is what the previous page returned."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise BadInput(f"limit = {limit!r}: expected a whole number from 1 to {MAX_PAGE}")
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int)
                               or cursor < 1):
        raise BadInput(f"cursor = {cursor!r}: expected the next_cursor of the previous page")
    tasks = queue.store.page_tasks(state=task_state(state), role=role, before_id=cursor,
                                   limit=limit)
    following = tasks[-1].id if len(tasks) == limit else None
    return {"tasks": tasks, "next_cursor": following}


def task_with_runs(queue: Queue, task_id: int) -> dict[str, Any]:
    """A task and its runs, oldest first, with what they cost together: the known dollars
    (None if no run was priced) and the runs of unknown cost (taskherd.policy.costs)."""
    task = queue.store.get_task(task_id)
    runs = queue.store.runs_of_task(task_id)
    costs = [run.cost_usd for run in runs if run.cost_usd is not None]
    unpriced = sum(1 for run in runs if is_unpriced(run))
    return {"task": task, "runs": runs, "cost_usd": sum(costs) if costs else None,
            "unpriced_runs": unpriced}


def task_tree(queue: Queue, task_id: int, depth: int = 4, width: int = 50) -> dict[str, Any]:
    """The chain a task belongs to, as a tree: from its topmost ancestor down, each task
    with its children (`depth` levels below the task at most, `width` children a task)."""
    store = queue.store
    top = store.get_task(task_id)
    for _ in range(20):  # a chain deeper than this is shown from 20 levels up
        if top.parent_id is None:
            break
        top = store.get_task(top.parent_id)

    def branch(task: Task, level: int) -> dict[str, Any]:
        children = store.children_of(task.id, width) if level < depth else []
        return {"task": task, "children": [branch(child, level + 1) for child in children]}

    return branch(top, 0)
