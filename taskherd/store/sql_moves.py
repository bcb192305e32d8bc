"""A person's transitions of a task (cancel, approve, reject, block, unblock, requeue): each
from the states it accepts to the one it names, then settled; a part of `SQLStore`."""

from __future__ import annotations

from collections.abc import Mapping

from taskherd.model import OPEN_STATES, Task, TaskState
from taskherd.store.base import StoreError, TransitionRefused
from taskherd.store.connection import Connection
from taskherd.store.sql_parts import SQLParts
from taskherd.store.sql_parts import one_row as _one

S = TaskState


class SQLMoves(SQLParts):
    def cancel(self, task_id: int, now: float, reason: str | None = None) -> Task:
        """Cancel this task only; `cancel_tree` cancels what its chain created below it too."""
        targets = {state: S.CANCELLED for state in OPEN_STATES}
        return self._move(task_id, "cancel", now, targets, reason=reason)

    def approve(self, task_id: int, now: float) -> Task:
        targets = {S.PENDING: S.READY, S.NEEDS_REVIEW: S.COMPLETED}
        return self._move(task_id, "approve", now, targets)

    def reject(self, task_id: int, now: float, reason: str | None = None) -> Task:
        # Counted like a reviewer's: at the role's max_reviews it goes to a person (blocked).
        with self._write() as db:
            task = self._get_task(db, task_id)
            if task.state is not S.NEEDS_REVIEW:
                raise TransitionRefused(task_id, "reject", task.state, {S.NEEDS_REVIEW: S.READY})
            rejected = self._reject_in(db, task, reason, now)
            self._cancel_other_reviews(db, task_id, None, now)
            return rejected

    def block(self, task_id: int, now: float, reason: str | None = None) -> Task:
        # A leased task is blocked by its agent (`taskherd block`), which ends the run too;
        # blocking it from outside would leave an agent working on a task nobody holds.
        targets = {S.PENDING: S.BLOCKED, S.READY: S.BLOCKED, S.NEEDS_REVIEW: S.BLOCKED}
        return self._move(task_id, "block", now, targets, reason=reason)

    def unblock(self, task_id: int, now: float) -> Task:
        return self._move(task_id, "unblock", now, {S.BLOCKED: S.READY})

    def requeue(self, task_id: int, now: float) -> Task:
        targets = {S.DEAD: S.READY, S.CANCELLED: S.READY}
        try:
            return self._move(task_id, "requeue", now, targets, reset_counts=True)
        except Exception as error:
            if not self._is_unique_error(error):
                raise
            raise StoreError(
                f"cannot requeue task {task_id}: another open task has its dedup key"
            ) from error

    def _move(
        self,
        task_id: int,
        action: str,
        now: float,
        targets: Mapping[TaskState, TaskState],
        *,
        reason: str | None = None,
        reset_counts: bool = False,
    ) -> Task:
        with self._write() as db:
            task = self._move_in(db, self._get_task(db, task_id), action, now, targets,
                                 reason=reason, reset_counts=reset_counts)
            if action == "approve" and task.state in (S.COMPLETED, S.MERGING):
                self._cancel_other_reviews(db, task_id, None, now)
            return task

    def _move_in(
        self,
        db: Connection,
        task: Task,
        action: str,
        now: float,
        targets: Mapping[TaskState, TaskState],
        *,
        reason: str | None = None,
        reset_counts: bool = False,
    ) -> Task:
        """`_move` inside the caller's transaction, from `task` as the caller read it."""
        task_id = task.id
        target = targets.get(task.state)
        if target is None:
            raise TransitionRefused(task_id, action, task.state, targets)
        params = {
            "task_id": task_id,
            "from_state": task.state.value,
            "state": target.value,
            "reason": reason,
            "now": now,
            "reset_counts": reset_counts,
        }
        row = _one(db.execute(self.q["move_task"], params))
        if row is None:  # moved meanwhile by another node (PostgreSQL's READ COMMITTED)
            raise TransitionRefused(task_id, action, self._get_task(db, task_id).state,
                                    targets)
        return self._finalize(db, Task.from_row(row), now)
