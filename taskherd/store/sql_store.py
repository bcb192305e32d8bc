"""The store's logic over named SQL blocks, shared by every dialect.

`SQLStore` implements each transition once: which named statements run, in which
transaction, and what they mean. A dialect subclass (`SQLiteStore`, `PostgresStore`) brings
the connection, the transaction that takes the write lock, its named SQL and the few places
where the databases differ (how an inserted id is read, what a constraint error looks like).
"""

from __future__ import annotations

import dataclasses
import json
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import TracebackType
from typing import Any

from taskherd.policy.chains import encode_chain, review_of, review_verdict
from taskherd.policy.limits import NODE, ClaimLimits, Refusal, Usage
from taskherd.model import (
    ANY_ROLE,
    FINAL_STATES,
    OPEN_STATES,
    Claim,
    Cooldown,
    Event,
    EventKind,
    NewTask,
    Outcome,
    Run,
    RunResult,
    Task,
    TaskState,
    Verdict,
)
from taskherd.policy.queue import rescued_result, settle
from taskherd.model.settings import RetryPolicy
from taskherd.store.base import (
    Enqueued,
    ParentNotFound,
    PolicyLookup,
    RunNotFound,
    StateCount,
    Store,
    StoreError,
    TaskNotFound,
    TransitionRefused,
)
from taskherd.model import Finished
from taskherd.store.connection import Connection
from taskherd.store.errors import ReportRefused, SpawnAllowance, SpawnLimitReached
from taskherd.store.messages import InboxLimit
from taskherd.store.requests import RequestKey
from taskherd.store.sql_agents import SQLAgents
from taskherd.store.sql_budgets import SQLBudgets
from taskherd.store.sql_credentials import SQLCredentials
from taskherd.store.sql_delivery import SQLDelivery
from taskherd.store.sql_jobs import SQLJobs
from taskherd.store.sql_memory import SQLMemory
from taskherd.store.sql_messages import SQLMessages
from taskherd.store.sql_nodes import SQLNodes
from taskherd.store.sql_reports import SQLReports, budget_rows
from taskherd.store.sql_requests import SQLRequests
from taskherd.store.sql_task_lists import SQLTaskLists
from taskherd.store.sql_tokens import SQLTokens
from taskherd.store.sql_workflows import SQLWorkflows
from taskherd.store.sql_worktrees import SQLWorktrees
from taskherd.store.watch import SQLWatch
from taskherd.model.settings import FLEET

S = TaskState
# An event a transition emitted, as (kind, now, fields); `built` makes the Events.
Emitted = tuple[EventKind, float, dict[str, Any]]


class SQLStore(SQLJobs, SQLNodes, SQLCredentials, SQLReports, SQLWatch, SQLTokens,
               SQLMessages, SQLAgents, SQLMemory, SQLDelivery, SQLWorkflows, SQLWorktrees,
               SQLBudgets, SQLRequests, SQLTaskLists, Store):
    q: Mapping[str, str]  # the dialect's named SQL blocks

    # -- what a dialect provides ---------------------------------------------------------

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Connection]:
        """One transaction that may write; it commits on leaving, rolls back on an error.
        It holds the store's lock throughout, which keeps `_outbox` its own."""

    @abstractmethod
    def _read(self) -> AbstractContextManager[Connection]:
        """A connection to read from (a consistent snapshot is not promised across reads)."""

    @abstractmethod
    def _insert_many(self, db: Connection, name: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Run the named INSERT once per row; the number of rows inserted."""

    @abstractmethod
    def _inserted_id(self, cursor: Any) -> int:
        """The id of the row the named INSERT just added."""

    @abstractmethod
    def _is_foreign_key_error(self, error: Exception) -> bool: ...

    @abstractmethod
    def _is_unique_error(self, error: Exception) -> bool: ...

    def _order_claims(self, db: Connection) -> None:
        """Order this transaction after every other claim that counts runs across nodes (and
        every cooldown set), until it ends: PostgreSQL's advisory lock. A no-op where the
        transaction already holds the database's one write lock (SQLite's BEGIN IMMEDIATE)."""

    def _together(self, db: Connection) -> AbstractContextManager[Any]:
        """The statements executed inside it reach the database together and their results
        come back together when it ends (PostgreSQL's pipeline: one round trip for them all,
        each statement still run after the one before, with a snapshot of its own); read
        their cursors after it. A no-op where a statement is a call in this process (SQLite).
        """
        return nullcontext()

    def _claim_started(self, db: Connection) -> None:
        """A claim's transaction began: PostgreSQL sets it to commit without waiting for the
        disk (the spawn's record that follows does) and to walk the ready tasks in order
        whatever its statistics say; a no-op elsewhere."""

    def _announce(self, db: Connection, outbox: Sequence[Emitted]) -> None:
        """Hand the transaction's events to the database, where it is the one to deliver
        them at commit (PostgreSQL's NOTIFY); a no-op elsewhere."""

    def _published(self, outbox: Sequence[Emitted]) -> None:
        """Deliver the events of a transaction that committed; a no-op where the database
        delivers them itself."""

    # -- the transaction and its events ---------------------------------------------

    # The events of the writing transaction under way, as (kind, now, fields): an Event is
    # built only for a listener, and most commits have none (claim+complete builds three).
    _outbox: list[Emitted] | None = None

    def _write(self) -> _Writing:
        """One writing transaction; the events its transitions emit reach listeners only
        if it commits, and only after."""
        return _Writing(self)

    def _emit(self, kind: EventKind, now: float, **fields: Any) -> None:
        """Queue an event of the current writing transaction."""
        assert self._outbox is not None, "an event outside a writing transaction"
        self._outbox.append((kind, now, fields))

    def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]:
        with self._read() as db:
            return db.execute(self.q[name], params).fetchall()

    # -- tasks ---------------------------------------------------------------------------

    def enqueue(self, new: NewTask, now: float, allowance: SpawnAllowance | None = None,
                once: RequestKey | None = None) -> Enqueued:
        with self._parents_checked([new]), self._write() as db:
            self._spawn_room(db, allowance)
            task_id, created = self._add_task(db, new, now)
            if task_id is None:
                raise StoreError(f"the open task with dedup key {new.dedup_key!r} finished while "
                                 "this one was being added: add it again")
            self._note_request(db, once, {"task": task_id, "created": created})
            return Enqueued(self._get_task(db, task_id), created=created)

    def enqueue_many(self, batch: Sequence[NewTask], now: float) -> int:
        with self._parents_checked(batch), self._write() as db:
            added = self._insert_many(db, "insert_task", (task_params(new, now) for new in batch))
            if added:
                # One event per role, not per task: a batch of 10,000 is one hint to look.
                for role in dict.fromkeys(new.role for new in batch):
                    self._emit(EventKind.TASK_ADDED, now, role=role)
            return added

    def get_task(self, task_id: int) -> Task:
        with self._read() as db:
            return self._get_task(db, task_id)

    def list_tasks(
        self, *, state: TaskState | None = None, role: str | None = None, limit: int = 100
    ) -> list[Task]:
        """Open tasks by priority then id, then finished ones; with a finished `state`, the
        most recently finished first (a history of a million has no useful oldest)."""
        params = {"state": state.value if state else None, "role": role, "limit": limit}
        query = "list_tasks" if state is None else (
            "list_finished_tasks_in_state" if state in FINAL_STATES else
            "list_open_tasks_in_state")
        return [Task.from_row(row) for row in self._all(query, params)]

    def page_tasks(self, *, state: TaskState | None = None, role: str | None = None,
                   before_id: int | None = None, limit: int = 100) -> list[Task]:
        params = {"state": state.value if state else None, "role": role,
                  "before_id": before_id, "limit": limit}
        # A finished state walks the primary key down: the history is mostly finished tasks.
        query = "page_open_tasks_in_state" if state in OPEN_STATES else "page_tasks"
        return [Task.from_row(row) for row in self._all(query, params)]

    def children_of(self, task_id: int, limit: int = 100) -> list[Task]:
        params = {"task_id": task_id, "limit": limit}
        return [Task.from_row(row) for row in self._all("children_of", params)]

    def counts(self) -> list[StateCount]:
        rows = self._past_the_marks(
            lambda marks: self._all("count_by_state_and_role",
                                    {"tasks_through": marks["tasks_through"]}))
        return [StateCount(TaskState(row["state"]), row["role"], row["n"]) for row in rows]

    # -- the worker's path ---------------------------------------------------------------

    def claim(
        self,
        node: str,
        now: float,
        lease_seconds: float,
        *,
        roles: Sequence[str] | None = None,
        full_pools: Sequence[str] | None = None,
        as_role: str | None = None,
        runtime: str | None = None,
        runtime_of: Mapping[str, str] | None = None,
        inbox: InboxLimit | None = None,
        limits: ClaimLimits | None = None,
        refusals: dict[str, Refusal] | None = None,
    ) -> Claim | None:
        if limits is not None:
            return self._claim_within(node, now, lease_seconds, limits, roles or [],
                                      full_pools or [], as_role, runtime, runtime_of or {},
                                      refusals if refusals is not None else {}, inbox)
        params = {
            "node": node,
            "now": now,
            "lease_until": now + lease_seconds,
            "roles": json.dumps(list(roles)) if roles is not None else None,
            "full_pools": json.dumps(list(full_pools)) if full_pools else None,
        }
        with self._write() as db:
            self._claim_started(db)
            row = _one(db.execute(self.q["claim_next"], params))
            if row is None:
                return None
            task = Task.from_row(row)
            role = as_role if task.role == ANY_ROLE and as_role else task.role
            runtime = runtime or (runtime_of or {}).get(role)
            run_params = {"task_id": task.id, "node": node, "role": role, "runtime": runtime,
                          "pool": None}
            run_row = _one(db.execute(self.q["insert_run"], run_params | {"now": now}))
            run = Run.from_row(run_row)
            # Delivered in the claim's transaction: a claim that rolls back delivers nothing,
            # and two runs never receive the same message.
            messages = self._deliver_inbox(db, run, inbox, now) if inbox else ()
            claim = Claim(task, run, messages)
            self._emit(EventKind.TASK_CHANGED, now, task_id=task.id, run_id=claim.run.id,
                       state=task.state, role=task.role)
        return claim

    def _claim_within(self, node: str, now: float, lease_seconds: float, limits: ClaimLimits,
                      roles: Sequence[str], full_pools: Sequence[str], as_role: str | None,
                      runtime: str | None, runtime_of: Mapping[str, str],
                      refusals: dict[str, Refusal], inbox: InboxLimit | None) -> Claim | None:
        """Claim the first ready task whose role and pools have room across every node,
        counted in the claim's transaction; a candidate that does not fit is passed by (its
        role, or its full task pool, noted in `refusals`) and the next one tried, each in a
        transaction of its own, so no lock outlives the candidate it was taken for."""
        allowed, full = list(roles), list(full_pools)
        while allowed:
            params = {"now": now, "roles": json.dumps(allowed),
                      "full_pools": json.dumps(full) if full else None}
            any_role = as_role if as_role in allowed else allowed[0]
            with self._write() as db:
                self._claim_started(db)
                candidate = _one(db.execute(self.q["claim_candidate"], params))
                if candidate is None:
                    return None
                role = any_role if candidate["role"] == ANY_ROLE else candidate["role"]
                claimed = self._claim_if_room(db, candidate, node, now, lease_seconds, limits,
                                              role, runtime or runtime_of.get(role), inbox)
                if isinstance(claimed, Claim):
                    return claimed
            pass_by(claimed, refusals, allowed, full)
        return None

    def _claim_if_room(self, db: Connection, candidate: Mapping[str, Any], node: str,
                       now: float, lease_seconds: float, limits: ClaimLimits, role: str,
                       runtime: str | None, inbox: InboxLimit | None) -> Claim | Refusal:
        """The candidate claimed as a run of `role` if its limits leave room, else why not:
        counted, then claimed, one step at a time (PostgreSQL does it in one statement)."""
        refusal = self._limits_refusal(db, node, now, limits, role, candidate["pool"])
        if refusal is not None:
            return refusal
        return self._claim_candidate(db, candidate["id"], node, now, lease_seconds, role,
                                     runtime, limits, inbox)

    def _limits_refusal(self, db: Connection, node: str, now: float, limits: ClaimLimits,
                        role: str, task_pool: str | None) -> Refusal | None:
        params = usage_params(node, now, limits, role, task_pool)
        # The lock and the count go together: every claim that counts across nodes holds
        # the lock for as long as its transaction, so each round trip inside it is one that
        # every other node's claim waits for. The count's snapshot is still taken after the
        # lock is granted (the statements run one after the other).
        with self._together(db):
            if limits.crosses_nodes(role, task_pool):
                self._order_claims(db)
            counted = db.execute(self.q["limit_usage"], params)
        usage = usage_of(_one(counted), params)
        refusal = limits.refusal(role, task_pool, usage, now)
        if refusal is None and limits.budget_scopes(role):
            return self._budget_refusal(db, limits, role, now)
        return refusal

    def _budget_refusal(self, db: Connection, limits: ClaimLimits, role: str,
                        now: float) -> Refusal | None:
        """Whether a budgeted role's next run still fits its budgets, from the spend read
        after the claims were ordered: every run claimed before this one, on any node, counts
        (its cost, or its expected cost while it is open), so no node starts a run once the
        spend committed reaches the limit."""
        span = limits.budget_periods(now)
        only = None if FLEET in limits.budget_scopes(role) else role
        params = {"month_start": span.month_start, "day_start": span.day_start, "role": only}
        rows = budget_rows(db.execute(self.q["budget_spend"], params).fetchall())
        return limits.budget_refusal(role, rows, span)

    def _claim_candidate(self, db: Connection, task_id: int, node: str, now: float,
                         lease_seconds: float, role: str, runtime: str | None,
                         limits: ClaimLimits, inbox: InboxLimit | None) -> Claim:
        claimed = {"id": task_id, "node": node, "now": now, "lease_until": now + lease_seconds}
        limit = limits.role(role)
        run_params = {"task_id": task_id, "node": node, "role": role, "runtime": runtime,
                      "pool": limit.pool, "now": now}
        # Together, in one round trip under the claims' lock: the candidate's row is locked
        # (SKIP LOCKED, or SQLite's write lock), so claim_task always claims it.
        with self._together(db):
            task_claimed = db.execute(self.q["claim_task"], claimed)
            run_inserted = db.execute(self.q["insert_run"], run_params)
            if limit.stagger:
                db.execute(self.q["note_role_claim"], {"role": role, "node": node, "now": now})
        return self._claimed(db, Task.from_row(_one(task_claimed)),
                             Run.from_row(_one(run_inserted)), now, inbox)

    def _claimed(self, db: Connection, task: Task, run: Run, now: float,
                 inbox: InboxLimit | None) -> Claim:
        """The claim of `task` by `run` within limits, its inbox delivered in the claim's
        transaction as in `claim`."""
        messages = self._deliver_inbox(db, run, inbox, now) if inbox else ()
        self._emit(EventKind.TASK_CHANGED, now, task_id=task.id, run_id=run.id,
                   state=task.state, role=task.role)
        return Claim(task, run, messages)

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
                raise StoreError(f"run {run_id} already ended ({run.outcome.value})")
            db.execute(
                self.q["renew_task_lease"],
                {"task_id": row["task_id"], "run_id": run_id, "now": now,
                 "lease_until": now + lease_seconds},
            )
            return self._get_run(db, run_id)

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
                raise StoreError(f"run {run_id} already ended ({run.outcome.value})")
            if (run.report, run.report_summary) == (params["report"], summary):
                return run  # the same report again (a retry): it stands, as it was
            raise ReportRefused(f"run {run_id} already reported {run.report!r}: the first "
                                f"report of a run stands (this {verdict!r} is not recorded)")

    def open_runs_of_final_tasks(self, node: str) -> list[Run]:
        return [Run.from_row(row) for row in self._all("open_runs_of_final_tasks", {"node": node})]

    def set_cooldown(self, runtime: str, until: float, reason: str, now: float,
                     span: float | None = None) -> Cooldown:
        params = {"runtime": runtime, "until": until, "reason": reason, "now": now, "span": span,
                  "down_since": None}
        with self._write() as db:
            self._order_claims(db)  # a claim under way either sees the cooldown or precedes it
            cooldown = Cooldown.from_row(_one(db.execute(self.q["set_cooldown"], params)))
            self._emit(EventKind.COOLDOWN_SET, now, runtime=runtime)
            return cooldown

    def active_cooldowns(self, now: float) -> list[Cooldown]:
        return [Cooldown.from_row(row) for row in self._all("active_cooldowns", {"now": now})]

    def cooldown_of(self, runtime: str) -> Cooldown | None:
        rows = self._all("cooldown_of", {"runtime": runtime})
        return Cooldown.from_row(rows[0]) if rows else None

    def clear_cooldown(self, runtime: str, now: float | None = None) -> bool:
        with self._write() as db:
            cleared = db.execute(self.q["clear_cooldown"], {"runtime": runtime}).rowcount > 0
            if cleared:
                at = time.time() if now is None else now  # only the event's stamp
                self._emit(EventKind.COOLDOWN_CLEARED, at, runtime=runtime)
            return cleared

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

    # -- a person's transitions ----------------------------------------------------------

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

    # -- runs and housekeeping -----------------------------------------------------------

    def get_run(self, run_id: int) -> Run:
        with self._read() as db:
            return self._get_run(db, run_id)

    def runs_of_task(self, task_id: int) -> list[Run]:
        return [Run.from_row(row) for row in self._all("runs_of_task", {"task_id": task_id})]

    def open_runs(self, node: str | None = None) -> list[Run]:
        return [Run.from_row(row) for row in self._all("open_runs", {"node": node})]

    def list_runs(
        self, *, role: str | None = None, since: float | None = None, limit: int = 100
    ) -> list[Run]:
        params = {"role": role, "since": since, "limit": limit}
        return [Run.from_row(row) for row in self._all("list_runs", params)]

    def prune(self, before: float) -> int:
        with self._write() as db:
            self._prune_messages(db, before)
            db.execute(self.q["prune_deliveries"], {"before": before})
            # What /metrics counts of the runs going is kept, in this transaction: its
            # counters are these totals plus the runs still kept, and never go down.
            db.execute(self.q["fold_pruned_runs"], {"before": before})
            return db.execute(self.q["prune_finished_tasks"], {"before": before}).rowcount

    def _past_the_marks(self, read: Callable[[Any], list[Any]]) -> list[Any]:
        """`read(marks)`, a query adding what lies past the roll-up's marks to its counters.

        The marks are read first and passed in as values (read inside the statement, they
        left PostgreSQL planning the range blind, as a scan of the whole history). A roll-up
        committed in between would have its rows counted twice, from the counters and past
        the old mark: so the marks are read again after, and the query repeated if they moved.
        """
        def current() -> dict[str, Any]:
            [row] = self._all("rollup_marks")
            return {"tasks_through": row["tasks_through"], "runs_through": row["runs_through"]}

        marks = current()
        while True:
            rows = read(marks)
            again = current()
            if again == marks:
                return rows
            marks = again

    def roll_up(self, now: float) -> int:
        folded = 0
        with self._write() as db:
            mark = _one(db.execute(self.q["runs_mark"]))
            if mark["through"] > mark["marked"]:
                db.execute(self.q["lock_runs_for_rollup"])
                # Again under the lock: the oldest open run may be one committed meanwhile.
                through = {"through": _one(db.execute(self.q["runs_mark"]))["through"]}
                folded += db.execute(self.q["roll_up_runs"], through).rowcount
                db.execute(self.q["roll_up_role_last_runs"], through)
                db.execute(self.q["advance_runs_mark"], through)
        # A task counts once it finished before the mark; the margin leaves room for a settle
        # stamped with a `now` taken a moment before its transaction got the write lock.
        through = {"through": now - ROLLUP_MARGIN}
        with self._write() as db:
            folded += db.execute(self.q["roll_up_finished_tasks"], through).rowcount
            db.execute(self.q["advance_tasks_mark"], through)
        return max(folded, 0)


    # -- shared steps of the transitions ----------------------------------------------

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
            raise StoreError(f"run {run_id} already ended ({run.outcome.value})")
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
        row = _one(db.execute(self.q["settle_task"], task_fields))
        self._emit(EventKind.RUN_ENDED, now, task_id=task.id, run_id=run.id, role=run.role,
                   runtime=run.runtime)
        if row is None:  # cancelled (or otherwise moved) while the run went on
            return Finished(run, task, moved=False)
        return Finished(run, self._finalize(db, Task.from_row(row), now, result), moved=True)

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
                  result: RunResult | None = None) -> Task:
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
            task = self._merge_due(db, task, now)
        self._emit(EventKind.TASK_CHANGED, now, task_id=task.id, state=task.state,
                   role=task.role)
        self._settle_workflow(db, task, now, result)
        if self._write_outbox(db, task, now):
            self._emit(EventKind.DELIVERY_QUEUED, now, task_id=task.id)
        return task

    def _spawn_room(self, db: Connection, allowance: SpawnAllowance | None) -> None:
        """Raise SpawnLimitReached unless the allowance's run may add one more: counted after
        locking its task's row (PostgreSQL; SQLite's write lock already holds), so two
        additions at once are counted one after the other."""
        if allowance is None:
            return
        params = {"task_id": allowance.task_id, "since": allowance.since}
        db.execute(self.q["lock_spawning_task"], params).fetchall()
        added = int(_one(db.execute(self.q["children_since"], params))["n"])
        if added >= allowance.max_spawn:
            raise SpawnLimitReached(added, allowance.max_spawn)

    def _add_task(self, db: Connection, new: NewTask, now: float) -> tuple[int | None, bool]:
        """Insert `new`: (its id, True), or (the id of the open task holding its dedup key,
        False): a duplicate of an open task is not added."""
        cursor = db.execute(self.q["insert_task"], task_params(new, now))
        if cursor.rowcount == 1:
            task_id = self._inserted_id(cursor)
            state = S.PENDING if new.pending else S.READY
            self._emit(EventKind.TASK_ADDED, now, task_id=task_id, state=state, role=new.role)
            return task_id, True
        row = _one(db.execute(self.q["open_task_by_dedup_key"], {"dedup_key": new.dedup_key}))
        # None only if that task finished in between, which PostgreSQL's READ COMMITTED allows.
        return (row["id"] if row is not None else None), False

    @contextmanager
    def _parents_checked(self, batch: Sequence[NewTask]) -> Iterator[None]:
        """Turn the foreign key's refusal of an unknown parent_id into an error naming it.

        Wraps the whole transaction: after a constraint error PostgreSQL accepts no more
        statements in it, so the parents are looked up in a read of their own.
        """
        try:
            yield
        except Exception as error:
            if not self._is_foreign_key_error(error):
                raise
            with self._read() as db:
                for new in batch:
                    if new.parent_id is not None and _one(
                            db.execute(self.q["get_task"], {"id": new.parent_id})) is None:
                        raise ParentNotFound(new.parent_id) from error
            raise

    def _get_task(self, db: Connection, task_id: int) -> Task:
        row = _one(db.execute(self.q["get_task"], {"id": task_id}))
        if row is None:
            raise TaskNotFound(task_id)
        return Task.from_row(row)

    def _get_run(self, db: Connection, run_id: int) -> Run:
        row = _one(db.execute(self.q["get_run"], {"id": run_id}))
        if row is None:
            raise RunNotFound(run_id)
        return Run.from_row(row)


# How far behind the present the finished tasks' mark stays (seconds).
ROLLUP_MARGIN = 60.0


class _Writing:
    """The context of `SQLStore._write`. A class rather than @contextmanager around the
    dialect's transaction: it is entered twice per claim+complete, and two nested generator
    contexts cost that path several percent."""

    __slots__ = ("db", "events", "store", "transaction")

    def __init__(self, store: SQLStore):
        self.store = store
        self.transaction = store._transaction()
        self.events: list[Emitted] = []

    def __enter__(self) -> Connection:
        self.db = self.transaction.__enter__()
        self.store._outbox = self.events
        return self.db

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> bool | None:
        self.store._outbox = None
        if kind is None and self.events:
            try:
                self.store._announce(self.db, self.events)
            except BaseException as failure:
                if not self.transaction.__exit__(type(failure), failure, failure.__traceback__):
                    raise
                return None
        suppressed = self.transaction.__exit__(kind, error, traceback)
        if kind is None and self.events:
            self.store._published(self.events)
        return suppressed


def built(outbox: Iterable[Emitted]) -> Iterator[Event]:
    """The events of an outbox, built as they are read."""
    return (Event(kind, now, **fields) for kind, now, fields in outbox)


def task_params(new: NewTask, now: float) -> dict[str, Any]:
    return {
        "role": new.role,
        "title": new.title,
        "prompt": new.prompt,
        "priority": int(new.priority),
        "state": S.PENDING.value if new.pending else S.READY.value,
        "pool": new.pool,
        "dedup_key": new.dedup_key,
        "review": int(new.review),
        "max_attempts": new.max_attempts,
        "run_after": now if new.run_after is None else new.run_after,
        "parent_id": new.parent_id,
        "meta": json.dumps(new.meta) if new.meta else "{}",
        "chain": encode_chain(new.chain),
        "now": now,
    }


def usage_params(node: str, now: float, limits: ClaimLimits, role: str,
                  task_pool: str | None) -> dict[str, Any]:
    """limit_usage's parameters for a run of `role` in `task_pool` on `node`."""
    limit = limits.role(role)
    pools = limits.pools_of(role, task_pool)
    pool_a, pool_b = (pools + (None, None))[:2]

    def node_filter(scope: str | None) -> str | None:
        return node if scope == NODE else None

    return {
        "now": now, "role": role, "role_node": node_filter(limit.scope),
        "pool_a": pool_a, "pool_a_node": node_filter(pool_a and limits.pools[pool_a].scope),
        "pool_b": pool_b, "pool_b_node": node_filter(pool_b and limits.pools[pool_b].scope),
        "runtime": limit.runtime,
    }


def usage_of(row: Mapping[str, Any], params: Mapping[str, Any]) -> Usage:
    """The Usage a row of limit_usage's columns read, for the pools `params` named."""
    running = {pool: row[column] for pool, column in
               ((params["pool_a"], "pool_a_running"), (params["pool_b"], "pool_b_running"))
               if pool}
    return Usage(row["role_running"], row["role_last_claim"], running, row["cooldown_until"])


def pass_by(refusal: Refusal, refusals: dict[str, Refusal], allowed: list[str],
            full: list[str]) -> None:
    """Note why a candidate was refused, and leave its kind out of the next candidates: the
    tasks of its full task pool, or else its role's."""
    refusals[refusal.role] = refusal
    if refusal.pool is not None:
        full.append(refusal.pool)
    else:
        allowed.remove(refusal.role)


def one_row(cursor: Any) -> Any:
    """The first row of a statement's result, or None; every row is read."""
    # Drain the cursor: a half-read RETURNING statement would keep COMMIT from finishing.
    rows = cursor.fetchall()
    return rows[0] if rows else None


_one = one_row  # the name this module's transitions use
