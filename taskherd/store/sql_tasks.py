"""Adding tasks: one, or a batch, each checked against its parent and its dedup key; a
part of `SQLStore`."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from taskherd.model import EventKind, NewTask, Task, TaskState
from taskherd.policy.chains import encode_chain
from taskherd.store.base import Enqueued, ParentNotFound, StoreError
from taskherd.store.connection import Connection
from taskherd.store.errors import SpawnAllowance, SpawnLimitReached
from taskherd.store.requests import RequestKey
from taskherd.store.sql_parts import SQLParts
from taskherd.store.sql_parts import one_row as _one

S = TaskState


class SQLTasks(SQLParts):
    def enqueue(self, new: NewTask, now: float, allowance: SpawnAllowance | None = None,
                once: RequestKey | None = None) -> Enqueued:
        with self._parents_checked([new]), self._write() as db:
            self._spawn_room(db, allowance)
            params = task_params(new, now)
            task_id, created, row = self._add_task_row(db, new, now, params)
            if task_id is None:
                raise StoreError(f"the open task with dedup key {new.dedup_key!r} finished while "
                                 "this one was being added: add it again")
            self._note_request(db, once, {"task": task_id, "created": created})
            if row is None and created:  # SQLite's INSERT returns no row: as it was written
                row = row_as_inserted(task_id, params)
            task = Task.from_row(row) if row is not None else self._get_task(db, task_id)
            return Enqueued(task, created=created)

    def enqueue_many(self, batch: Sequence[NewTask], now: float) -> int:
        with self._parents_checked(batch), self._write() as db:
            added = self._insert_tasks(db, batch, now)
            if added:
                # One event per role, not per task: a batch of 10,000 is one hint to look.
                for role in dict.fromkeys(new.role for new in batch):
                    self._emit(EventKind.TASK_ADDED, now, role=role)
            return added

    def _insert_tasks(self, db: Connection, batch: Sequence[NewTask], now: float) -> int:
        """Add the batch: how many were added (a duplicate of an open task is not)."""
        return self._insert_many(db, "insert_task", (task_params(new, now) for new in batch))

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
        task_id, created, _ = self._add_task_row(db, new, now)
        return task_id, created

    def _add_task_row(self, db: Connection, new: NewTask, now: float,
                      params: dict[str, Any] | None = None
                      ) -> tuple[int | None, bool, Mapping[str, Any] | None]:
        """As _add_task, with the added task's row where the INSERT returned it (PostgreSQL),
        so that an enqueue answers without reading the task back. `params`: `new`'s
        task_params, where the caller made them already."""
        cursor = db.execute(self.q["insert_task"], params or task_params(new, now))
        if cursor.rowcount == 1:
            task_id, added = self._inserted(cursor)
            state = S.PENDING if new.pending else S.READY
            self._emit(EventKind.TASK_ADDED, now, task_id=task_id, state=state, role=new.role)
            return task_id, True, added
        row = _one(db.execute(self.q["open_task_by_dedup_key"], {"dedup_key": new.dedup_key}))
        # None only if that task finished in between, which PostgreSQL's READ COMMITTED allows.
        return (row["id"] if row is not None else None), False, None

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


def row_as_inserted(task_id: int, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The row insert_task just wrote from `params`, as SQLite gives it back, without reading
    it (a task added read its row back: a fifth of the API's store work a POST /v1/tasks).
    The columns in the table's order (a read gives them so; a task's answer keeps its fields
    in that order), those insert_task does not set at their defaults: kept beside the schema
    by test_hot_statements, which holds the answer against a read. None where the row holds
    what the parameters do not say (a child's root and depth are its parent's) or SQLite
    would keep a value of another type than the one given (its column's affinity converts
    it): then the row is read."""
    if params["parent_id"] is not None or not _plain(params):
        return None
    now = float(params["now"])  # REAL: an int is kept as a float
    return {"id": task_id, "role": params["role"], "title": params["title"],
            "prompt": params["prompt"], "priority": params["priority"], "state": params["state"],
            "pool": params["pool"], "dedup_key": params["dedup_key"], "review": params["review"],
            "attempts": 0, "max_attempts": params["max_attempts"], "rescues": 0,
            "rate_limits": 0, "run_after": float(params["run_after"]), "lease_node": None,
            "lease_expires_at": None, "last_error": None, "error_tail": None, "summary": None,
            "reason": None, "parent_id": None, "meta": params["meta"], "created_at": now,
            "updated_at": now, "finished_at": None, "root_id": None, "depth": 0,
            "chain": params["chain"], "rejections": 0}


def _plain(params: Mapping[str, Any]) -> bool:
    """Whether each value given is of the type its column keeps (task_params makes the
    priority, the state and the review so)."""
    pool, dedup_key, chain = params["pool"], params["dedup_key"], params["chain"]
    return (type(params["role"]) is str and type(params["title"]) is str
            and type(params["prompt"]) is str and type(params["meta"]) is str
            and type(params["max_attempts"]) is int
            and type(params["run_after"]) in _NUMBERS and type(params["now"]) in _NUMBERS
            and (pool is None or type(pool) is str)
            and (dedup_key is None or type(dedup_key) is str)
            and (chain is None or type(chain) is str))


_NUMBERS = (int, float)


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
