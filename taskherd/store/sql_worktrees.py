"""The store's side of a git worktree per task: where each task's worktree is, and the merge
its completion calls for. The settle step (`SQLStore._finalize`) that brings a task with a
worktree to `completed` (after any review or gate has let it get there) leaves it `merging`
instead; the worktree service does the git work after that commit, off the daemon's loop, and
records how it went (`finish_merge`) in a short transaction of its own. No git runs inside a
store transaction: a hook that hangs holds no lock that another task needs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import Task
from taskherd.store.connection import Connection
from taskherd.store.sql_parts import UNREAD, Unread
from taskherd.store.worktrees import WorktreeRecord

__all__ = ["SQLWorktrees", "WorktreeRecord"]


class SQLWorktrees:
    """Mixed into SQLStore: `_write`, `_all`, `q` and `_finalize` are its own."""

    if TYPE_CHECKING:
        q: Mapping[str, str]

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _finalize(self, db: Connection, task: Task, now: float) -> Task: ...

    def record_worktree(self, task_id: int, *, repo: str, base: str, branch: str, path: str,
                        merge_mode: str, pool: str, now: float) -> None:
        params = {"task_id": task_id, "repo": repo, "base": base, "branch": branch,
                  "path": path, "merge_mode": merge_mode, "pool": pool, "now": now}
        with self._write() as db:
            db.execute(self.q["record_worktree"], params)

    def worktree_of(self, task_id: int) -> WorktreeRecord | None:
        rows = self._all("worktree_of", {"task_id": task_id})
        return WorktreeRecord.from_row(rows[0]) if rows else None

    def worktrees_to_remove(self, before: float) -> list[WorktreeRecord]:
        return [WorktreeRecord.from_row(r) for r in self._all("worktrees_to_remove",
                                                              {"before": before})]

    def kept_worktrees(self) -> list[WorktreeRecord]:
        return [WorktreeRecord.from_row(r) for r in self._all("kept_worktrees")]

    def mark_worktree_removed(self, record: WorktreeRecord, now: float) -> None:
        with self._write() as db:
            db.execute(self.q["set_worktree_state"], {
                "task_id": record.task_id, "state": "removed", "now": now,
                "merged_commit": record.merged_commit,
                "conflicts": json.dumps(list(record.conflicts)) if record.conflicts else None})

    def merges_due(self) -> list[WorktreeRecord]:
        """The worktrees of the tasks waiting in `merging`, oldest task first."""
        return [WorktreeRecord.from_row(r) for r in self._all("merges_due")]

    def take_merge_pool(self, pool: str, task_id: int, node: str, now: float,
                        stale_before: float) -> bool:
        """The pool's turn for this task's merge on `node`, if no other merge holds it (one
        held since before `stale_before` no longer does: its node died mid-merge)."""
        params = {"pool": pool, "task_id": task_id, "node": node, "now": now,
                  "stale_before": stale_before}
        with self._write() as db:
            return db.execute(self.q["take_merge_pool"], params).fetchone() is not None

    def finish_merge(self, record: WorktreeRecord, now: float, *, commit: str | None = None,
                     blocked: str | None = None, conflicts: tuple[str, ...] = ()) -> Task | None:
        """Record how the merge of `record`'s branch went and release its pool: merged (the
        task completes, and what its completion sets off happens now), or `blocked` with the
        reason. None when the task had left `merging` meanwhile (cancelled)."""
        params = {"task_id": record.task_id, "now": now}
        with self._write() as db:
            db.execute(self.q["set_worktree_state"], {
                **params, "state": "conflict" if blocked else "merged", "merged_commit": commit,
                "conflicts": json.dumps(list(conflicts)) if blocked else None})
            db.execute(self.q["release_merge_pool"], {"pool": record.pool, **params})
            if blocked:
                row = db.execute(self.q["block_merging_task"], {**params, "reason": blocked})
            else:
                row = db.execute(self.q["complete_merged_task"], params)
            moved = row.fetchone()
            return self._finalize(db, Task.from_row(moved), now) if moved is not None else None

    def _merge_due(self, db: Any, task: Task, now: float,
                   worktree: Mapping[str, Any] | None | Unread = UNREAD) -> Task:
        """A task that reached `completed` with an active worktree waits in `merging` for the
        worktree service: nothing its completion sets off (chain, notifications) happens yet.
        `worktree` is the task's row in worktrees where the caller read it already (a run's
        end reads it with the task's settle, in the same round trip)."""
        row = (db.execute(self.q["worktree_of"], {"task_id": task.id}).fetchone()
               if isinstance(worktree, Unread) else worktree)
        if row is None or row["state"] != "active":
            return task
        moved = db.execute(self.q["merge_due_task"], {"task_id": task.id, "now": now}).fetchone()
        return Task.from_row(moved) if moved is not None else task
