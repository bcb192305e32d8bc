"""Lists of tasks by any filter over named SQL (`store/sql/common/task_lists.sql`); mixed
into `SQLStore`."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from taskherd.model import OPEN_STATES, EventKind, Task
from taskherd.store.errors import TransitionRefused
from taskherd.store.task_lists import SORTS, TaskFilter, TaskListStore

# A search of one or two characters (no trigram to look up) reads the newest this many tasks,
# not a million: a few hundredths of a second.
SHORT_SCAN = 100_000
MAX_TRIGRAMS = 16


class SQLTaskLists(TaskListStore):
    if TYPE_CHECKING:
        from taskherd.store.connection import Connection

        q: Mapping[str, str]

        def _all(self, name: str, params: Mapping[str, Any] = {}) -> list[Any]: ...
        def _write(self) -> AbstractContextManager[Connection]: ...
        def _get_task(self, db: Connection, task_id: int) -> Task: ...
        def _emit(self, kind: EventKind, now: float, **fields: Any) -> None: ...

    def filter_tasks(self, wanted: TaskFilter, *, sort: str = "newest", limit: int = 50,
                     offset: int = 0) -> list[Task]:
        if sort not in SORTS:
            raise ValueError(f"sort {sort!r}: expected one of {', '.join(SORTS)}")
        params = _filter_params(wanted) | {"limit": limit, "offset": offset}
        return [Task.from_row(row) for row in self._all(f"filter_tasks_{sort}", params)]

    def count_filtered_tasks(self, wanted: TaskFilter, cap: int) -> int:
        rows = self._all("count_filtered_tasks", _filter_params(wanted) | {"cap": cap})
        return int(rows[0]["n"])

    def set_priority(self, task_id: int, priority: int, now: float) -> Task:
        with self._write() as db:
            task = self._get_task(db, task_id)
            row = db.execute(self.q["set_task_priority"], {
                "task_id": task_id, "priority": priority, "now": now}).fetchone()
            if row is None:
                raise TransitionRefused(task_id, "change the priority of", task.state, OPEN_STATES)
            changed = Task.from_row(row)
            # Told as a change like any other: open pages and dispatchers read it again.
            self._emit(EventKind.TASK_CHANGED, now, task_id=task_id, state=changed.state,
                       role=changed.role)
            return changed


def _filter_params(wanted: TaskFilter) -> dict[str, Any]:
    state = wanted.state
    text = wanted.text
    # `#42` is task 42 only, read by its key; `42` alone is also looked for in the text.
    only_id = _as_id(text) if text is not None and text.strip().startswith("#") else None
    return {
        "state": state.value if state else None,
        "role": wanted.role, "priority": wanted.priority, "node": wanted.node,
        "job": wanted.job,
        "only_id": only_id,
        "pattern": None if text is None or only_id else f"%{_escaped(text.lower())}%",
        "trigrams": None if text is None or only_id else trigram_query(text),
        "short_scan": SHORT_SCAN,
        "text_id": _as_id(text),
        "finished_from": wanted.finished_from, "finished_to": wanted.finished_to,
    }


def trigram_query(text: str) -> str | None:
    """The FTS5 query asking for the tasks that have every trigram of `text` (its three
    characters at each place, lower-cased, each quoted: nothing of `text` is read as query
    syntax); None for a text under three characters, which has none. At most MAX_TRIGRAMS of
    them, spread over the text: they only narrow the candidates, which LIKE then checks."""
    lowered = text.lower()
    found = list(dict.fromkeys(lowered[i:i + 3] for i in range(len(lowered) - 2)))
    if not found:
        return None
    if len(found) > MAX_TRIGRAMS:
        step = len(found) / MAX_TRIGRAMS
        found = [found[int(n * step)] for n in range(MAX_TRIGRAMS)]
    return " AND ".join('"' + trigram.replace('"', '""') + '"' for trigram in found)


def _escaped(text: str) -> str:
    """`text` as a LIKE pattern matching it literally (its %, _ and \\ escaped)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _as_id(text: str | None) -> int | None:
    digits = (text or "").strip().lstrip("#")
    return int(digits) if digits.isdigit() and len(digits) < 19 else None
