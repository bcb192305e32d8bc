"""Workflows in the store: the children a settle creates, reviews and their verdicts, cancels
that follow a chain down, the chain's tree, and the records of quality gates.

Everything here runs inside the transaction of the settle that caused it (`_settle_workflow`
is called from `SQLStore._finalize`): a parent is never completed while its children, or its
review task, are missing. The decisions are `taskherd.policy.chains`'s; this module only
writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskherd.model import (
    FINAL_STATES,
    OPEN_STATES,
    EventKind,
    GateCheck,
    NewTask,
    Run,
    RunResult,
    Task,
    TaskState,
)
from taskherd.policy.chains import NO_WORKFLOW, Workflow, review_of, review_verdict
from taskherd.store.connection import Connection
from taskherd.store.errors import TransitionRefused
from taskherd.store.sql_parts import UNREAD, Unread

if TYPE_CHECKING:
    from taskherd.store.requests import RequestKey

S = TaskState
CANCEL_TARGETS = {state: S.CANCELLED for state in OPEN_STATES}


class SQLWorkflows:
    q: Mapping[str, str]
    # The config's roles as the store needs them (default chains, reviewers, depth limit);
    # whoever opens the store for a config sets it (`open_store(..., workflow=)`).
    workflow: Workflow = NO_WORKFLOW

    # provided by SQLStore
    def _write(self) -> Any: raise NotImplementedError
    def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]:
        raise NotImplementedError
    def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: raise NotImplementedError
    def _get_task(self, db: Connection, task_id: int) -> Task: raise NotImplementedError
    def _add_task(self, db: Connection, new: NewTask, now: float) -> tuple[int | None, bool]:
        raise NotImplementedError
    def _insert_many(self, db: Connection, name: str, rows: Any) -> int: raise NotImplementedError
    def _move_in(self, db: Connection, task: Task, action: str, now: float,
                 targets: Mapping[TaskState, TaskState], *, reason: str | None = None,
                 reset_counts: bool = False) -> Task: raise NotImplementedError
    if TYPE_CHECKING:  # SQLRequests' (a stub here would come first in SQLStore's bases)
        def _note_request(self, db: Connection, key: RequestKey | None,
                          made: dict[str, Any]) -> None: ...

    # -- what a settle sets off --------------------------------------------------------

    def _settle_workflow(self, db: Connection, task: Task, now: float,
                         result: RunResult | None) -> None:
        workflow = self.workflow
        if task.state is S.COMPLETED or task.state is S.DEAD:
            if workflow.may_chain(task):
                self._spawn_chain(db, task, now, result)
        reviewed = review_of(task)
        # A review's verdict is its run's word, applied as the run ends: a reviewer whose own
        # worktree branch waits in `merging` has given it all the same (the merge that later
        # completes it has no run, and no verdict to read).
        if reviewed is not None and result is not None and task.state in (S.COMPLETED,
                                                                         S.MERGING):
            verdict = review_verdict(result.summary, result.output_tail)
            if verdict is not None:
                self._apply_verdict(db, reviewed, verdict[0], verdict[1], now)
        if task.state is S.NEEDS_REVIEW and result is not None and workflow.reviewed(task.role):
            # The store hands over facts (the task, its last log); the workflow writes the
            # reviewer's prompt.
            self._add_task(db, workflow.review_task(task, self._last_log(db, task.id), now),
                           now)

    def _spawn_chain(self, db: Connection, task: Task, now: float,
                     result: RunResult | None) -> None:
        tail = result.output_tail if result is not None else None
        # What the run said: its summary (or, for a dead task, its error) and its last lines.
        said = task.summary if task.state is S.COMPLETED else task.last_error
        text = "\n".join(filter(None, [said, tail or task.error_tail]))
        spawn = self.workflow.children(task, now, text, self._last_log(db, task.id))
        if spawn.refused:
            db.execute(self.q["note_task_reason"],
                       {"task_id": task.id, "reason": spawn.refused, "now": now})
        if spawn.children:
            from taskherd.store.sql_tasks import task_params

            self._insert_many(db, "insert_task", (task_params(c, now) for c in spawn.children))
            for role in dict.fromkeys(child.role for child in spawn.children):
                self._emit(EventKind.TASK_ADDED, now, role=role)

    def _last_log(self, db: Connection, task_id: int) -> str | None:
        rows = db.execute(self.q["last_log_of_task"], {"task_id": task_id}).fetchall()
        return rows[0]["log_path"] if rows else None

    # -- reviews -------------------------------------------------------------------------

    def review_verdict(self, review_task_id: int, verdict: str, reason: str | None,
                       now: float, once: RequestKey | None = None) -> Task:
        """The verdict of the reviewer working on `review_task_id` on the task it reviews,
        which must be waiting in needs_review; returns the reviewed task as it now is."""
        with self._write() as db:
            review = self._get_task(db, review_task_id)
            reviewed = review_of(review)
            if reviewed is None:
                raise TransitionRefused(review_task_id, verdict, review.state, {})
            moved = self._apply_verdict(db, reviewed, verdict, reason, now)
            if moved is None:
                found = self._get_task(db, reviewed)
                raise TransitionRefused(reviewed, verdict, found.state, {S.NEEDS_REVIEW: S.READY})
            self._note_request(db, once, {"task": moved.id})
            return moved

    def _apply_verdict(self, db: Connection, task_id: int, verdict: str, reason: str | None,
                       now: float) -> Task | None:
        task = self._get_task(db, task_id)
        if task.state is not S.NEEDS_REVIEW:
            return None  # a person decided first, or another review did
        if verdict == "approve":
            moved = self._move_in(db, task, "approve", now, {S.NEEDS_REVIEW: S.COMPLETED})
        else:
            moved = self._reject_in(db, task, reason, now)
        # No other review is cancelled here (a person's decision does that): the only other
        # reviews of the task are of earlier rounds, which gave their verdict and are still
        # finishing, and cancelling one raced its own settle (it ended cancelled, not done).
        return moved

    def _reject_in(self, db: Connection, task: Task, reason: str | None, now: float) -> Task:
        state, note = self.workflow.after_rejection(task)
        reason = reason or "rejected without a reason"
        params = {"task_id": task.id, "state": state.value, "now": now,
                  "reason": f"{reason}\n\n({note})" if note else reason}
        rows = db.execute(self.q["reject_task"], params).fetchall()
        if not rows:
            found = self._get_task(db, task.id)
            raise TransitionRefused(task.id, "reject", found.state, {S.NEEDS_REVIEW: S.READY})
        return self._finalize(db, Task.from_row(rows[0]), now)

    def _cancel_other_reviews(self, db: Connection, task_id: int, keep: int | None,
                              now: float) -> None:
        """Open review tasks of a task that no longer waits for review have nothing to do."""
        for row in db.execute(self.q["open_children"], {"task_id": task_id}).fetchall():
            child = Task.from_row(row)
            if review_of(child) == task_id and child.id != keep:
                self._move_in(db, child, "cancel", now, CANCEL_TARGETS,
                              reason=f"task {task_id} was decided without this review")

    def _finalize(self, db: Connection, task: Task, now: float,
                  result: RunResult | None = None,
                  worktree: Mapping[str, Any] | None | Unread = UNREAD) -> Task:
        raise NotImplementedError

    # -- cancels that follow the chain -----------------------------------------------------

    def cancel_tree(self, task_id: int, now: float, reason: str | None = None) -> list[Task]:
        """Cancel a task and every open task below it, in one transaction; the task first.
        A task already finished still has its open descendants cancelled."""
        with self._write() as db:
            task = self._get_task(db, task_id)
            below = [Task.from_row(row) for row in
                     db.execute(self.q["open_descendants"], {"task_id": task_id}).fetchall()]
            if task.state in FINAL_STATES and not below:
                raise TransitionRefused(task_id, "cancel", task.state, CANCEL_TARGETS)
            cancelled = []
            if task.state not in FINAL_STATES:
                cancelled.append(self._move_in(db, task, "cancel", now, CANCEL_TARGETS,
                                               reason=reason))
            why = reason or f"task {task_id} above it was cancelled"
            for child in below:
                # A child a settle of this same cancel already moved (a review cancelled with
                # its reviewed task) is skipped: re-read it.
                current = self._get_task(db, child.id)
                if current.state in FINAL_STATES:
                    continue
                cancelled.append(self._move_in(db, current, "cancel", now, CANCEL_TARGETS,
                                               reason=why))
            return cancelled

    # -- reading a chain ---------------------------------------------------------------

    def tree(self, task_id: int) -> tuple[list[Task], dict[int, Run]]:
        """Every task of the chain `task_id` belongs to (from its root), and the latest run of
        each that has one."""
        with self._read() as db:
            task = self._get_task(db, task_id)
            root = task.root_id or task.id
            tasks = [Task.from_row(r) for r in db.execute(self.q["tree_of_root"],
                                                          {"root_id": root}).fetchall()]
            runs = [Run.from_row(r) for r in db.execute(self.q["last_runs_of_root"],
                                                        {"root_id": root}).fetchall()]
        return tasks, {run.task_id: run for run in runs}

    def _read(self) -> Any: raise NotImplementedError

    def children_since(self, task_id: int, since: float) -> int:
        rows = self._all("children_since", {"task_id": task_id, "since": since})
        return int(rows[0]["n"])

    # -- the planner's view of the queue -----------------------------------------------

    def ready_count(self) -> int:
        return int(self._all("ready_count")[0]["n"])

    def has_open_task_of_role(self, role: str) -> bool:
        return bool(self._all("open_task_of_role", {"role": role}))

    def last_task_of_role(self, role: str) -> float | None:
        rows = self._all("last_task_of_role", {"role": role})
        return float(rows[0]["at"]) if rows else None

    def recent_dead(self, since: float, limit: int = 5) -> list[Task]:
        return [Task.from_row(r) for r in self._all("recent_dead",
                                                    {"since": since, "limit": limit})]

    def next_run_after(self, now: float) -> float | None:
        rows = self._all("next_run_after", {"now": now})
        return float(rows[0]["at"]) if rows and rows[0]["at"] is not None else None

    # -- quality gates -----------------------------------------------------------------

    def gate_started(self, run_id: int, name: str, log_path: str | None, now: float, *,
                     pid: int | None = None, pid_started_at: float | None = None) -> int:
        with self._write() as db:
            rows = db.execute(self.q["insert_gate_check"],
                              {"run_id": run_id, "name": name, "log_path": log_path,
                               "now": now, "pid": pid,
                               "pid_started_at": pid_started_at}).fetchall()
            return int(rows[0]["id"])

    def gate_ended(self, gate_id: int, now: float, *, exit_code: int | None, passed: bool,
                   error: str | None = None) -> None:
        with self._write() as db:
            db.execute(self.q["end_gate_check"],
                       {"gate_id": gate_id, "now": now, "exit_code": exit_code,
                        "passed": int(passed), "error": error})

    def gates_of_run(self, run_id: int) -> list[GateCheck]:
        return [GateCheck.from_row(row) for row in
                self._all("gate_checks_of_run", {"run_id": run_id})]

    def gates_of_task(self, task_id: int) -> list[GateCheck]:
        return [GateCheck.from_row(row) for row in
                self._all("gate_checks_of_task", {"task_id": task_id})]

