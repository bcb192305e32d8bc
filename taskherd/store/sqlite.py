"""The SQLite store: stdlib sqlite3, WAL, BEGIN IMMEDIATE, a long busy_timeout (DESIGN §5)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from taskherd.model import (
    OPEN_STATES,
    Claim,
    Cooldown,
    NewTask,
    Outcome,
    Run,
    RunResult,
    Task,
    TaskState,
)
from taskherd.queue import RetryPolicy, settle
from taskherd.store.base import (
    Enqueued,
    Finished,
    ParentNotFound,
    PolicyLookup,
    RunNotFound,
    StateCount,
    Store,
    StoreError,
    TaskNotFound,
    TransitionRefused,
)
from taskherd.store.sqlfile import migrations, queries
from taskherd.store.sqlite_jobs import SQLiteJobs

DURABILITY = {"full": "FULL", "normal": "NORMAL"}
REPORTS = ("done", "fail", "block")
# Long enough that a burst of writers from several processes queues up instead of failing:
# "database is locked" must never reach a caller.
DEFAULT_BUSY_TIMEOUT = 60.0

Q = queries("sqlite")
S = TaskState


class SQLiteStore(SQLiteJobs, Store):
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        autocheckpoint: bool = True,
    ):
        if durability not in DURABILITY:
            raise StoreError(f"durability {durability!r} is not one of: full, normal")
        self.path = Path(path)
        _create_private(self.path)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, timeout=busy_timeout, check_same_thread=False
        )
        self._conn.row_factory = sqlite3.Row
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        self._enable_wal()
        self._conn.execute(f"PRAGMA synchronous = {DURABILITY[durability]}")
        self._conn.execute("PRAGMA foreign_keys = ON")
        if not autocheckpoint:
            # The daemon checkpoints from a worker thread instead: an automatic checkpoint
            # runs inside whichever commit crosses the threshold and, at durability full,
            # holds the event loop for the fsync of the whole database (p99 spawn latency).
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")
        self.busy_timeout = busy_timeout
        _migrate(self._conn)

    def _enable_wal(self) -> None:
        # Switching to WAL needs a moment of exclusive access; two processes opening a fresh
        # database at once can meet here, and the busy handler is not consulted for it.
        deadline = time.monotonic() + 30
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction that takes the write lock up front, so it never has to upgrade."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(Q[name], params).fetchall()

    # -- tasks ---------------------------------------------------------------------------

    def enqueue(self, new: NewTask, now: float) -> Enqueued:
        with self._write() as db, _parents_checked(db, [new]):
            cursor = db.execute(Q["insert_task"], _task_params(new, now))
            if cursor.rowcount == 1:
                return Enqueued(_get_task(db, cursor.lastrowid), created=True)
            row = _one(db.execute(Q["open_task_by_dedup_key"], {"dedup_key": new.dedup_key}))
            return Enqueued(Task.from_row(row), created=False)

    def enqueue_many(self, batch: Sequence[NewTask], now: float) -> int:
        with self._write() as db, _parents_checked(db, batch):
            before = db.total_changes
            db.executemany(Q["insert_task"], (_task_params(new, now) for new in batch))
            return db.total_changes - before

    def get_task(self, task_id: int) -> Task:
        with self._lock:
            return _get_task(self._conn, task_id)

    def list_tasks(
        self, *, state: TaskState | None = None, role: str | None = None, limit: int = 100
    ) -> list[Task]:
        params = {"state": state.value if state else None, "role": role, "limit": limit}
        return [Task.from_row(row) for row in self._all("list_tasks", params)]

    def counts(self) -> list[StateCount]:
        return [
            StateCount(TaskState(row["state"]), row["role"], row["n"])
            for row in self._all("count_by_state_and_role")
        ]

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
    ) -> Claim | None:
        params = {
            "node": node,
            "now": now,
            "lease_until": now + lease_seconds,
            "roles": json.dumps(list(roles)) if roles is not None else None,
            "full_pools": json.dumps(list(full_pools)) if full_pools else None,
        }
        with self._write() as db:
            row = _one(db.execute(Q["claim_next"], params))
            if row is None:
                return None
            task = Task.from_row(row)
            role = as_role if task.role == "any" and as_role else task.role
            run_params = {"task_id": task.id, "node": node, "role": role, "runtime": runtime}
            run_row = _one(db.execute(Q["insert_run"], run_params | {"now": now}))
        return Claim(task, Run.from_row(run_row))

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
            run = _get_run(db, run_id)
            if _one(db.execute(Q["mark_run_spawned"], params)) is None:
                raise StoreError(f"run {run_id} already ended or was already marked spawned")
            moved = db.execute(
                Q["mark_task_running"],
                {"task_id": run.task_id, "node": run.node, "now": now,
                 "lease_until": now + lease_seconds},
            ).rowcount
            task = _get_task(db, run.task_id)
        if not moved:
            raise TransitionRefused(task.id, "start", task.state, {S.CLAIMED})
        return task

    def heartbeat(
        self, run_id: int, now: float, lease_seconds: float, progress: str | None = None
    ) -> Run:
        with self._write() as db:
            row = _one(db.execute(Q["touch_run"], {"run_id": run_id, "now": now, "progress": progress}))
            if row is None:
                run = _get_run(db, run_id)
                raise StoreError(f"run {run_id} already ended ({run.outcome.value})")
            db.execute(
                Q["renew_task_lease"],
                {"task_id": row["task_id"], "run_id": run_id, "now": now,
                 "lease_until": now + lease_seconds},
            )
            return _get_run(db, run_id)

    def renew_leases(self, node: str, now: float, lease_seconds: float) -> int:
        with self._write() as db:
            params = {"node": node, "lease_until": now + lease_seconds}
            return db.execute(Q["renew_node_leases"], params).rowcount

    def finish_run(
        self, run_id: int, result: RunResult, policy: RetryPolicy, now: float
    ) -> Finished:
        with self._write() as db:
            return _finish(db, run_id, result, policy, now)

    def report(self, run_id: int, verdict: str, now: float, summary: str | None = None) -> Run:
        if verdict not in REPORTS:
            raise StoreError(f"report {verdict!r} is not one of: {', '.join(REPORTS)}")
        params = {"run_id": run_id, "report": verdict, "summary": summary, "now": now}
        with self._write() as db:
            row = _one(db.execute(Q["report_run"], params))
            if row is None:
                run = _get_run(db, run_id)
                raise StoreError(f"run {run_id} already ended ({run.outcome.value})")
            return Run.from_row(row)

    def open_runs_of_final_tasks(self, node: str) -> list[Run]:
        return [Run.from_row(row) for row in self._all("open_runs_of_final_tasks", {"node": node})]

    def set_cooldown(self, runtime: str, until: float, reason: str, now: float) -> Cooldown:
        params = {"runtime": runtime, "until": until, "reason": reason, "now": now}
        with self._write() as db:
            return Cooldown.from_row(_one(db.execute(Q["set_cooldown"], params)))

    def active_cooldowns(self, now: float) -> list[Cooldown]:
        return [Cooldown.from_row(row) for row in self._all("active_cooldowns", {"now": now})]

    def clear_cooldown(self, runtime: str) -> bool:
        with self._write() as db:
            return db.execute(Q["clear_cooldown"], {"runtime": runtime}).rowcount > 0

    def rescue_expired(self, now: float, policy_for: PolicyLookup) -> list[Finished]:
        rescued = []
        with self._write() as db:
            for row in db.execute(Q["expired_leases"], {"now": now}).fetchall():
                task = Task.from_row(row)
                run_row = _one(db.execute(Q["open_run_of_task"], {"task_id": task.id}))
                if run_row is None:
                    continue  # a lease without a run cannot be made by claim; nothing to end
                lost = RunResult(Outcome.LOST, error="lease expired: no node renewed it")
                rescued.append(_finish(db, run_row["id"], lost, policy_for(task.role), now))
        return rescued

    # -- a person's transitions ----------------------------------------------------------

    def cancel(self, task_id: int, now: float, reason: str | None = None) -> Task:
        targets = {state: S.CANCELLED for state in OPEN_STATES}
        return self._move(task_id, "cancel", now, targets, reason=reason)

    def approve(self, task_id: int, now: float) -> Task:
        targets = {S.PENDING: S.READY, S.NEEDS_REVIEW: S.COMPLETED}
        return self._move(task_id, "approve", now, targets)

    def reject(self, task_id: int, now: float, reason: str | None = None) -> Task:
        return self._move(task_id, "reject", now, {S.NEEDS_REVIEW: S.READY}, reason=reason)

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
        except sqlite3.IntegrityError as error:
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
            task = _get_task(db, task_id)
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
            return Task.from_row(_one(db.execute(Q["move_task"], params)))

    # -- runs and housekeeping -----------------------------------------------------------

    def get_run(self, run_id: int) -> Run:
        with self._lock:
            return _get_run(self._conn, run_id)

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
            return db.execute(Q["prune_finished_tasks"], {"before": before}).rowcount

    def checkpoint(self) -> None:
        # A connection of its own: the store's is guarded by a lock the event loop takes.
        with contextlib.closing(sqlite3.connect(self.path, timeout=self.busy_timeout)) as db:
            db.execute(Q["wal_checkpoint"]).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _finish(
    db: sqlite3.Connection, run_id: int, result: RunResult, policy: RetryPolicy, now: float
) -> Finished:
    """End the run with `result` and settle its task, inside the caller's transaction."""
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
    ended = _one(db.execute(Q["end_run"], run_fields))
    if ended is None:
        run = _get_run(db, run_id)  # raises RunNotFound for an unknown id
        raise StoreError(f"run {run_id} already ended ({run.outcome.value})")
    run = Run.from_row(ended)
    task = _get_task(db, run.task_id)
    recent_rate_limits = 0
    if result.outcome is Outcome.RATE_LIMITED:
        window = {"task_id": task.id, "since": now - 24 * 3600}
        # The run just ended is among them; the policy counts the ones before it.
        recent_rate_limits = db.execute(Q["recent_rate_limits"], window).fetchone()[0] - 1
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
    row = _one(db.execute(Q["settle_task"], task_fields))
    return Finished(run, Task.from_row(row) if row else task, moved=row is not None)


@contextmanager
def _parents_checked(db: sqlite3.Connection, batch: Sequence[NewTask]) -> Iterator[None]:
    """Turn the foreign key's refusal of an unknown parent_id into an error naming it."""
    try:
        yield
    except sqlite3.IntegrityError as error:
        if "FOREIGN KEY" not in str(error):
            raise
        for new in batch:
            if new.parent_id is not None and _one(
                    db.execute(Q["get_task"], {"id": new.parent_id})) is None:
                raise ParentNotFound(new.parent_id) from error
        raise


def _task_params(new: NewTask, now: float) -> dict[str, Any]:
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
        "now": now,
    }


def _one(cursor: sqlite3.Cursor) -> sqlite3.Row | None:
    # Drain the cursor: a half-read RETURNING statement would keep COMMIT from finishing.
    rows = cursor.fetchall()
    return rows[0] if rows else None


def _get_task(db: sqlite3.Connection, task_id: int) -> Task:
    row = _one(db.execute(Q["get_task"], {"id": task_id}))
    if row is None:
        raise TaskNotFound(task_id)
    return Task.from_row(row)


def _get_run(db: sqlite3.Connection, run_id: int) -> Run:
    row = _one(db.execute(Q["get_run"], {"id": run_id}))
    if row is None:
        raise RunNotFound(run_id)
    return Run.from_row(row)


def _create_private(path: Path) -> None:
    """Create the database file (and its folder) readable by its owner only.

    SQLite gives the -wal and -shm files the main file's permissions, so this covers them.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)


def _migrate(db: sqlite3.Connection) -> None:
    """Apply the numbered migrations not yet recorded, each in its own transaction."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    pending = migrations("sqlite")
    applied = {row[0] for row in db.execute("SELECT version FROM schema_migrations")}
    for migration in pending:
        if migration.version in applied:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have applied it while we waited for the write lock.
            exists = db.execute(
                "SELECT 1 FROM schema_migrations WHERE version = ?", (migration.version,)
            ).fetchone()
            if not exists:
                for statement in migration.statements():
                    db.execute(statement)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time()),
                )
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
