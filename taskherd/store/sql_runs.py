"""A run from its spawn to its end, and the settle of its task that its end sets off (the
one step every settle passes, `_finalize`); a part of `SQLStore`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from taskherd.model import (
    EventKind,
    Finished,
    Outcome,
    Run,
    RunResult,
    Task,
    TaskState,
    Verdict,
    row_fields,
)
from taskherd.model.settings import RetryPolicy
from taskherd.policy.chains import review_of, review_verdict
from taskherd.policy.queue import rescued_result, settle
from taskherd.store.base import PolicyLookup, StoreError, TransitionRefused
from taskherd.store.connection import Connection
from taskherd.store.errors import ReportRefused
from taskherd.store.sql_parts import UNREAD, SQLParts, Unread
from taskherd.store.sql_parts import one_row as _one

S = TaskState


class SQLRuns(SQLParts):
    def mark_spawned(
        self,
        run_id: int,
        now: float,
        lease_seconds: float,
        *,
        pid: int | None,
        pid_started_at: float | None,
        log_path: str | None,
    ) -> Task:
        params = {
            "run_id": run_id,
            "now": now,
            "pid": pid,
            "pid_started_at": pid_started_at,
            "log_path": log_path,
        }
        with self._write() as db:
            run = self._get_run(db, run_id)
            if _one(db.execute(self.q["mark_run_spawned"], params)) is None:
                raise StoreError(f"run {run_id} already ended or was already marked spawned")
            moved = db.execute(
                self.q["mark_task_running"],
                {"task_id": run.task_id, "node": run.node, "now": now,
                 "lease_until": now + lease_seconds},
            ).rowcount
            task = self._get_task(db, run.task_id)
            if moved:
                self._emit(EventKind.RUN_STARTED, now, task_id=task.id, run_id=run_id,
                           state=task.state, role=run.role, runtime=run.runtime)
        if not moved:
            raise TransitionRefused(task.id, "start", task.state, {S.CLAIMED})
        return task

    def heartbeat(
        self, run_id: int, now: float, lease_seconds: float, progress: str | None = None
    ) -> Run:
        with self._write() as db:
            touch = {"run_id": run_id, "now": now, "progress": progress}
            row = _one(db.execute(self.q["touch_run"], touch))
            if row is None:
                run = self._get_run(db, run_id)
                raise _already_ended(run)
            fields = row_fields(row)
            lease_until = fields.pop("task_lease_until")
            # A lease with more than half to run is left as it is: an agent's heartbeats come
            # seconds apart, and each renewal rewrote the task's row and its queue index (two
            # fifths of a heartbeat's store work). Its node's daemon renews every third of a
            # lease besides, so the lease is kept either way.
            if lease_until is None or lease_until - now <= lease_seconds / 2:
                db.execute(
                    self.q["renew_task_lease"],
                    {"task_id": row["task_id"], "run_id": run_id, "now": now,
                     "lease_until": now + lease_seconds},
                )
            return Run.from_row(fields)

    def renew_leases(self, node: str, now: float, lease_seconds: float) -> int:
        with self._write() as db:
            params = {"node": node, "lease_until": now + lease_seconds}
            return db.execute(self.q["renew_node_leases"], params).rowcount

    def finish_run(
        self, run_id: int, result: RunResult, policy: RetryPolicy, now: float
    ) -> Finished:
        with self._write() as db:
            return self._finish(db, run_id, result, policy, now)

    def report(self, run_id: int, verdict: str, now: float, summary: str | None = None) -> Run:
        if verdict not in set(Verdict):
            accepted = ", ".join(Verdict)
            raise StoreError(f"report {verdict!r} is not one of: {accepted}")
        params = {"run_id": run_id, "report": Verdict(verdict).value, "summary": summary,
                  "now": now}
        with self._write() as db:
            row = _one(db.execute(self.q["report_run"], params))
            if row is not None:
                return Run.from_row(row)
            run = self._get_run(db, run_id)
            if run.ended_at is not None:
                raise _already_ended(run)
            if (run.report, run.report_summary) == (params["report"], summary):
                return run  # the same report again (a retry): it stands, as it was
            raise ReportRefused(f"run {run_id} already reported {run.report!r}: the first "
                                f"report of a run stands (this {verdict!r} is not recorded)")

    def rescue_expired(self, now: float, policy_for: PolicyLookup) -> list[Finished]:
        rescued = []
        with self._write() as db:
            for row in db.execute(self.q["expired_leases"], {"now": now}).fetchall():
                task = Task.from_row(row)
                run_row = _one(db.execute(self.q["open_run_of_task"], {"task_id": task.id}))
                if run_row is None:
                    # Claim makes no lease without a run: its node is settling it right now
                    # (PostgreSQL's open_run_of_task skips a locked run), so leave it to it.
                    continue
                lost = RunResult(Outcome.LOST, error="lease expired: no node renewed it")
                rescued.append(self._finish(db, run_row["id"], lost, policy_for(task.role), now))
        return rescued

    def _finish(
        self, db: Connection, run_id: int, result: RunResult, policy: RetryPolicy, now: float
    ) -> Finished:
        """End the run with `result` and settle its task, inside the caller's transaction."""
        if result.outcome is Outcome.LOST:  # a rescue: what its agent reported still counts
            result = rescued_result(self._get_run(db, run_id), result, policy)
        run_fields = {
            "run_id": run_id,
            "now": now,
            "outcome": result.outcome.value,
            "exit_code": result.exit_code,
            "summary": result.summary,
            "error": result.error,
            "cost_usd": result.cost_usd,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            "turns": result.turns,
            "session_id": result.session_id,
        }
        with self._together(db):
            ending = db.execute(self.q["end_run"], run_fields)
            task_read = db.execute(self.q["task_of_run"], {"run_id": run_id})
        ended = _one(ending)
        if ended is None:
            run = self._get_run(db, run_id)  # raises RunNotFound for an unknown id
            raise _already_ended(run)
        run = Run.from_row(ended)
        task = Task.from_row(_one(task_read))
        recent_rate_limits = 0
        if result.outcome is Outcome.RATE_LIMITED:
            window = {"task_id": task.id, "since": now - policy.rate_limit_window}
            # The run just ended is among them; the policy counts the ones before it.
            recent_rate_limits = _one(db.execute(self.q["recent_rate_limits"], window))["n"] - 1
        if review_of(task) is not None:
            judged = self._review_needs_verdict(db, task, result)
            if judged is not result:  # the run is recorded as what it was: a failure
                result = judged
                refail = {"run_id": run.id, "error": result.error}
                run = Run.from_row(_one(db.execute(self.q["fail_review_run"], refail)))
        if not task.review and self.workflow.reviewed(task.role):
            # The role's reviewer is not optional: a task added without review still gets one.
            task = dataclasses.replace(task, review=True)
        settlement = settle(task, result, policy, now, recent_rate_limits)
        task_fields = {
            "task_id": task.id,
            "run_id": run.id,
            "now": now,
            "state": settlement.state.value,
            "run_after": settlement.run_after,
            "strike": settlement.strike,
            "rescue": settlement.rescue,
            "rate_limit": settlement.rate_limit,
            "summary": result.summary,
            "last_error": result.error,
            "error_tail": result.error_tail,
            "reason": settlement.reason,
        }
        with self._together(db):
            settling = db.execute(self.q["settle_task"], task_fields)
            # Read with the settle, in its round trip (a completed task with an active
            # worktree waits in merging): not a round trip of its own after it.
            worktree_read = db.execute(self.q["worktree_of"], {"task_id": task.id})
        row, worktree = _one(settling), _one(worktree_read)
        self._emit(EventKind.RUN_ENDED, now, task_id=task.id, run_id=run.id, role=run.role,
                   runtime=run.runtime)
        if row is None:  # cancelled (or otherwise moved) while the run went on
            return Finished(run, task, moved=False)
        return Finished(run, self._finalize(db, Task.from_row(row), now, result, worktree),
                        moved=True)

    def _review_needs_verdict(self, db: Connection, review: Task, result: RunResult) -> RunResult:
        """A review that ends without a verdict while its task still waits has not done its
        work: a failure (a strike, and the next attempt is told why), not a silent success."""
        if result.outcome is not Outcome.SUCCEEDED:
            return result
        if review_verdict(result.summary, result.output_tail) is not None:
            return result
        reviewed = _one(db.execute(self.q["get_task"], {"id": review_of(review)}))
        if reviewed is None or reviewed["state"] != S.NEEDS_REVIEW.value:
            return result  # decided through `taskherd approve|reject`, or by a person
        error = ("the review ended without a verdict: print APPROVED or 'REJECTED: reason', "
                 "or run `taskherd approve` / `taskherd reject --reason …`")
        return RunResult(Outcome.FAILED, result.exit_code, error=error,
                         error_tail=result.output_tail, cost_usd=result.cost_usd,
                         input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                         turns=result.turns, session_id=result.session_id)

    def _finalize(self, db: Connection, task: Task, now: float,
                  result: RunResult | None = None,
                  worktree: Mapping[str, Any] | None | Unread = UNREAD) -> Task:
        """The one step every settle of a task passes, in the settling transaction: a run's
        end (finished, rescued, rate-limited, dead) and a person's move (approve, reject,
        cancel, block, unblock, requeue). Whatever must happen when a task settles attaches
        here, so that it happens exactly when the settle commits and never around it: a
        chain's children, gates and reviews, notifications' outbox rows; a completed task
        with a worktree branch to merge waits in `merging` instead (the worktree service
        merges it after this commit, then completes or blocks it through here again); the
        event that tells listeners (the daemons' dispatchers among them) where the task went,
        and the outbox rows of the delivery targets the task names (sent after the commit).
        """
        if task.state is TaskState.COMPLETED:
            task = self._merge_due(db, task, now, worktree)
        self._emit(EventKind.TASK_CHANGED, now, task_id=task.id, state=task.state,
                   role=task.role)
        self._settle_workflow(db, task, now, result)
        if self._write_outbox(db, task, now):
            self._emit(EventKind.DELIVERY_QUEUED, now, task_id=task.id)
        return task


def _already_ended(run: Run) -> StoreError:
    outcome = run.outcome.value if run.outcome is not None else "no outcome"
    return StoreError(f"run {run.id} already ended ({outcome})")
