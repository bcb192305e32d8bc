"""The store interface for lists of tasks by any filter (`Store` inherits it): what the
dashboard's lists read. Which filters a person may give, and what they mean in words, is
decided in `ops/task_lists.py`; the store only reads the rows (`sql/common/task_lists.sql`).
"""

from __future__ import annotations

import abc

from taskherd.model import Task, TaskState
from taskherd.model.record import Record

SORTS = ("newest", "oldest", "priority")


class TaskFilter(Record):
    """Tasks matching every field given (None: any). `text` is found in the title or the
    prompt (any case), or is the task's id; a finished range is [finished_from, finished_to)."""

    state: TaskState | None = None
    role: str | None = None
    priority: int | None = None
    node: str | None = None
    job: str | None = None
    text: str | None = None
    finished_from: float | None = None
    finished_to: float | None = None


class TaskListStore(abc.ABC):
    @abc.abstractmethod
    def filter_tasks(self, wanted: TaskFilter, *, sort: str = "newest", limit: int = 50,
                     offset: int = 0) -> list[Task]:
        """The tasks matching `wanted` in the order `sort` (one of SORTS), from `offset` on."""

    @abc.abstractmethod
    def count_filtered_tasks(self, wanted: TaskFilter, cap: int) -> int:
        """How many tasks match `wanted`, counted up to `cap` (at most `cap` is returned)."""

    @abc.abstractmethod
    def set_priority(self, task_id: int, priority: int, now: float) -> Task:
        """Give an open task `priority` (0-3); TransitionRefused for a finished task."""

    def index_task_text(self, most: int) -> int:
        """Put up to `most` of the tasks the text search's index does not hold yet into it
        (the oldest first), in one short writing transaction; how many it put (0: none
        waits). The search finds them before and after. A store whose index takes each task
        as it is added (PostgreSQL) has nothing to do."""
        return 0
