"""What the parts of `SQLStore` (sql_tasks, sql_claims, sql_runs, ...) use of one another.

Each part is a mixin of `SQLStore` and calls steps another part defines (the transaction,
reading a task, the settle): this class names them for the type checker, and is empty
when the program runs, so it never stands before the part that defines a step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskherd.model import (
        EventKind,
        Finished,
        InboxLimit,
        Message,
        NewTask,
        Run,
        RunResult,
        Task,
        TaskState,
    )
    from taskherd.model.settings import RetryPolicy
    from taskherd.policy.chains import Workflow
    from taskherd.store.connection import Connection
    from taskherd.store.errors import SpawnAllowance
    from taskherd.store.requests import RequestKey


class Unread:
    """A row the caller has not read (None would say there is no such row): read it."""


UNREAD = Unread()


class SQLParts:
    if TYPE_CHECKING:
        q: Mapping[str, str]
        workflow: Workflow

        # sql_store: the dialect and the transaction
        _outbox: list[tuple[EventKind, float, dict[str, Any]]] | None

        def _write(self) -> AbstractContextManager[Connection]: ...
        def _savepoint(self, db: Connection) -> AbstractContextManager[Connection]: ...
        def _transaction_lost(self, db: Connection) -> bool: ...
        def _read(self) -> AbstractContextManager[Connection]: ...
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: ...
        def _insert_many(self, db: Connection, name: str,
                         rows: Iterable[Mapping[str, Any]]) -> int: ...
        def _inserted(self, cursor: Any) -> tuple[int, Mapping[str, Any] | None]: ...
        def _is_foreign_key_error(self, error: Exception) -> bool: ...
        def _is_unique_error(self, error: Exception) -> bool: ...
        def _order_claims(self, db: Connection) -> None: ...
        def _together(self, db: Connection) -> AbstractContextManager[Any]: ...
        def _claim_started(self, db: Connection) -> None: ...

        # sql_reads, sql_runs, sql_moves, sql_history
        def _get_task(self, db: Connection, task_id: int) -> Task: ...
        def _get_run(self, db: Connection, run_id: int) -> Run: ...
        def _finish(self, db: Connection, run_id: int, result: RunResult, policy: RetryPolicy,
                    now: float) -> Finished: ...
        def _finalize(self, db: Connection, task: Task, now: float,
                      result: RunResult | None = None,
                      worktree: Mapping[str, Any] | None | Unread = UNREAD) -> Task: ...
        def _move_in(self, db: Connection, task: Task, action: str, now: float,
                     targets: Mapping[TaskState, TaskState], *, reason: str | None = None,
                     reset_counts: bool = False) -> Task: ...
        def _past_the_marks(self, read: Callable[[Any], list[Any]]) -> list[Any]: ...
        def _spawn_room(self, db: Connection, allowance: SpawnAllowance | None) -> None: ...
        def _add_task(self, db: Connection, new: NewTask,
                      now: float) -> tuple[int | None, bool]: ...

        # the other parts (messages, requests, workflows, worktrees, delivery)
        def _deliver_inbox(self, db: Connection, run: Run, limit: InboxLimit,
                           now: float) -> tuple[Message, ...]: ...
        def _prune_messages(self, db: Connection, before: float) -> int: ...
        def _note_request(self, db: Connection, key: RequestKey | None,
                          made: dict[str, Any]) -> None: ...
        def _merge_due(self, db: Connection, task: Task, now: float,
                       worktree: Mapping[str, Any] | None | Unread = UNREAD) -> Task: ...
        def _settle_workflow(self, db: Connection, task: Task, now: float,
                             result: RunResult | None) -> None: ...
        def _write_outbox(self, db: Connection, task: Task, now: float) -> int: ...
        def _reject_in(self, db: Connection, task: Task, reason: str | None,
                       now: float) -> Task: ...
        def _cancel_other_reviews(self, db: Connection, task_id: int, keep: int | None,
                                  now: float) -> None: ...


def one_row(cursor: Any) -> Any:
    """The first row of a statement's result, or None; every row is read."""
    # Drain the cursor: a half-read RETURNING statement would keep COMMIT from finishing.
    rows = cursor.fetchall()
    return rows[0] if rows else None
