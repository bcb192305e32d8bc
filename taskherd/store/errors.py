"""The store's errors, worded for people: what was asked, what was found."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from taskherd.model import Fault, TaskState


class StoreError(Exception):
    """Base of the store's errors meant for people."""


class StoreUnavailable(StoreError):
    """The database cannot serve this call now (connection lost, deadlock): try again later."""


class StoreDiskFull(StoreUnavailable):
    """The database could not write: its disk is full (SQLite's "database or disk is full",
    PostgreSQL's disk_full). The transaction was rolled back, nothing changed; it may be tried
    again once space is freed. The machine's fault, not the caller's (faults.py)."""

    fault = Fault.DISK

    def __init__(self, detail: str):
        super().__init__(f"disk full: the database could not write ({detail}); free space "
                         "on its disk, then try again")


class TaskNotFound(StoreError):
    def __init__(self, task_id: int):
        super().__init__(f"no task with id {task_id}")
        self.task_id = task_id


class ParentNotFound(TaskNotFound):
    """A new task names a parent_id no task has: bad input, like an unknown task id."""

    def __init__(self, parent_id: int):
        StoreError.__init__(self, f"parent_id = {parent_id}: no task with that id")
        self.task_id = parent_id


class RunNotFound(StoreError):
    def __init__(self, run_id: int):
        super().__init__(f"no run with id {run_id}")
        self.run_id = run_id


@dataclass(frozen=True)
class SpawnAllowance:
    """What a run may still add below its task: at most `max_spawn` tasks and jobs since
    `since` (its claim). Counted in the transaction that adds, under a lock on the task, so
    two additions at once cannot both take the last place."""

    task_id: int
    since: float
    max_spawn: int


def max_spawn_reached(added: int, max_spawn: int) -> str:
    return f"refused: this run already added {added} tasks and jobs (max_spawn {max_spawn})"


class SpawnLimitReached(StoreError):
    def __init__(self, added: int, max_spawn: int):
        super().__init__(max_spawn_reached(added, max_spawn))
        self.added, self.max_spawn = added, max_spawn


class TransitionRefused(StoreError):
    """The task is not in a state the transition may leave."""

    def __init__(self, task_id: int, action: str, found: TaskState, allowed: Iterable[TaskState]):
        names = ", ".join(sorted(s.value for s in allowed))
        super().__init__(f"cannot {action} task {task_id}: it is {found.value} (allowed from: {names})")
        self.task_id = task_id
        self.found = found
