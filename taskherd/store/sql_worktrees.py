"""The store's side of a git worktree per task: where each task's worktree is, and the merge
its completion makes (in the settle step, `SQLStore._finalize`, when a task reaches
`completed`: after any review or gate has let it get there)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskherd.model import Task, row_fields

log = logging.getLogger("taskherd.worktrees")


@dataclass(frozen=True)
class WorktreeRecord:
    task_id: int
    repo: str
    base: str
    branch: str
    path: str
    merge_mode: str
    pool: str
    state: str  # active, merged, conflict, removed
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


class SQLWorktrees:
    """Mixed into SQLStore: `_write`, `_all`, `q` and `_emit` are its own."""

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

    def _merge_on_completion(self, db: Any, task: Task, now: float) -> Task:
        """A task that reached `completed` with an active worktree has its branch merged
        into the base, holding its merge pool; a conflict (or a merge git refuses) blocks it
        instead, naming the files, with the branch kept."""
        row = db.execute(self.q["worktree_of"], {"task_id": task.id}).fetchone()
        if row is None or row["state"] != "active":
            return task
        record = WorktreeRecord.from_row(row)
        db.execute(self.q["hold_merge_pool"], {"pool": record.pool, "task_id": task.id,
                                               "now": now})
        from taskherd import worktrees

        message = f"Merge {record.branch}: {task.title}"[:500]
        try:
            worktrees.commit_leftovers(Path(record.path),
                                       f"Uncommitted work of task {task.id}: {task.title}"[:500])
            result = worktrees.merge_branch(Path(record.repo), record.base, record.branch,
                                            record.merge_mode, message)
        except worktrees.GitError as error:
            log.warning("task %s: merging %s failed: %s", task.id, record.branch, error)
            return self._block_merge(db, task, record, f"merging {record.branch} into "
                                     f"{record.base} failed: {error}", (), now)
        if not result.merged:
            return self._block_merge(db, task, record,
                                     result.reason(record.branch, record.base),
                                     result.conflicts, now)
        db.execute(self.q["set_worktree_state"], {
            "task_id": task.id, "state": "merged", "merged_commit": result.commit,
            "conflicts": None, "now": now})
        log.info("task %s: %s merged into %s%s", task.id, record.branch, record.base,
                 f" at {result.commit[:12]}" if result.commit else " (nothing new)")
        return task

    def _block_merge(self, db: Any, task: Task, record: WorktreeRecord, reason: str,
                     conflicts: tuple[str, ...], now: float) -> Task:
        db.execute(self.q["set_worktree_state"], {
            "task_id": task.id, "state": "conflict", "merged_commit": None,
            "conflicts": json.dumps(list(conflicts)), "now": now})
        row = db.execute(self.q["block_completed_task"], {"task_id": task.id,
                                                           "reason": reason, "now": now})
        blocked = row.fetchone()
        return Task.from_row(blocked) if blocked is not None else task
