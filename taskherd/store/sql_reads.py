"""Reading tasks and runs: one by id, lists and pages of them, the counts by state and role;
a part of `SQLStore`."""

from __future__ import annotations

from taskherd.model import FINAL_STATES, OPEN_STATES, Run, Task, TaskState
from taskherd.store.base import RunNotFound, StateCount, TaskNotFound
from taskherd.store.connection import Connection
from taskherd.store.sql_parts import SQLParts
from taskherd.store.sql_parts import one_row as _one


class SQLReads(SQLParts):
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

    def open_runs_of_final_tasks(self, node: str) -> list[Run]:
        return [Run.from_row(row) for row in self._all("open_runs_of_final_tasks", {"node": node})]

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
