"""Lists of tasks by any filter over named SQL (`store/sql/common/task_lists.sql`); mixed
into `SQLStore`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskherd.model import Task
from taskherd.store.task_lists import SORTS, TaskFilter, TaskListStore


class SQLTaskLists(TaskListStore):
    if TYPE_CHECKING:
        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...

    def filter_tasks(self, wanted: TaskFilter, *, sort: str = "newest", limit: int = 50,
                     offset: int = 0) -> list[Task]:
        if sort not in SORTS:
            raise ValueError(f"sort {sort!r}: expected one of {', '.join(SORTS)}")
        params = _filter_params(wanted) | {"limit": limit, "offset": offset}
        return [Task.from_row(row) for row in self._all(f"filter_tasks_{sort}", params)]

    def count_filtered_tasks(self, wanted: TaskFilter, cap: int) -> int:
        rows = self._all("count_filtered_tasks", _filter_params(wanted) | {"cap": cap})
        return int(rows[0]["n"])


def _filter_params(wanted: TaskFilter) -> dict[str, Any]:
    state = wanted.state
    text = wanted.text
    return {
        "state": state.value if state else None,
        "role": wanted.role, "priority": wanted.priority, "node": wanted.node,
        "job": wanted.job,
        "pattern": None if text is None else f"%{_escaped(text.lower())}%",
        "text_id": _as_id(text),
        "finished_from": wanted.finished_from, "finished_to": wanted.finished_to,
    }


def _escaped(text: str) -> str:
    """`text` as a LIKE pattern matching it literally (its %, _ and \\ escaped)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _as_id(text: str | None) -> int | None:
    digits = (text or "").strip().lstrip("#")
    return int(digits) if digits.isdigit() and len(digits) < 19 else None
