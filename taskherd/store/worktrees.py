"""The worktree store interface: where each task's git worktree is, and the merge its
completion calls for (the SQL side, and why no git runs inside a transaction, is in
`sql_worktrees.py`). `Store` inherits it."""

from __future__ import annotations

import abc
import json
from typing import Any

from taskherd.model import Task, row_fields
from taskherd.model.record import Record


class WorktreeRecord(Record):
    task_id: int
    repo: str
    base: str
    branch: str
    path: str
    merge_mode: str
    pool: str
    state: str  # active, merged, conflict (or a merge git refused), removed
    merged_commit: str | None
    conflicts: tuple[str, ...]
    created_at: float
    updated_at: float
    task_state: str | None = None  # when read with its task

    @classmethod
    def from_row(cls, row: Any) -> WorktreeRecord:
        data = row_fields(row)
        fields = {key: data[key] for key in data if key in cls.__dataclass_fields__}
        fields["conflicts"] = tuple(json.loads(data["conflicts"])) if data["conflicts"] else ()
        return cls(**fields)


class WorktreeStore(abc.ABC):
    @abc.abstractmethod
    def record_worktree(self, task_id: int, *, repo: str, base: str, branch: str, path: str,
                        merge_mode: str, pool: str, now: float) -> None: ...

    @abc.abstractmethod
    def worktree_of(self, task_id: int) -> WorktreeRecord | None: ...

    @abc.abstractmethod
    def worktrees_to_remove(self, before: float) -> list[WorktreeRecord]:
        """Worktrees whose task finished before `before`, to be removed from disk."""

    @abc.abstractmethod
    def kept_worktrees(self) -> list[WorktreeRecord]:
        """Worktrees still on disk (not yet removed), with their task's state."""

    @abc.abstractmethod
    def mark_worktree_removed(self, record: WorktreeRecord, now: float) -> None: ...

    @abc.abstractmethod
    def merges_due(self) -> list[WorktreeRecord]:
        """The worktrees of the tasks waiting in `merging`, oldest task first."""

    @abc.abstractmethod
    def take_merge_pool(self, pool: str, task_id: int, node: str, now: float,
                        stale_before: float) -> bool:
        """The pool's turn for this task's merge on `node`, if no other merge holds it (one
        held since before `stale_before` no longer does: its node died mid-merge)."""

    @abc.abstractmethod
    def finish_merge(self, record: WorktreeRecord, now: float, *, commit: str | None = None,
                     blocked: str | None = None, conflicts: tuple[str, ...] = ()) -> Task | None:
        """Record how the merge went and release its pool; the task as it ends (None when it
        had left `merging` meanwhile)."""
