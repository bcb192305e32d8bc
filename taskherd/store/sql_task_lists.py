"""Lists of tasks by any filter over named SQL (`store/sql/common/task_lists.sql`); mixed
into `SQLStore`."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from taskherd.model import OPEN_STATES, EventKind, Task
from taskherd.store.errors import TransitionRefused
from taskherd.store.task_lists import SORTS, TaskFilter, TaskListStore

# A search of one or two characters (no trigram to look up) reads the newest this many tasks,
# not a million: a few hundredths of a second.
SHORT_SCAN = 20_000
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
        params = _filter_params(wanted)
        if params["trigrams"] is None or sort == "priority":
            params |= {"trigrams": None, "limit": limit, "offset": offset}
            return [Task.from_row(row) for row in self._all(f"filter_tasks_{sort}", params)]
        by_id = self._task_by_number(wanted)
        if by_id is None:
            return self._searched(params, sort, limit, offset)
        # The task the number names sorts in among the matches of its text: the page is read
        # from one row earlier, so that a task before the page moves it down by one.
        start = max(offset - 1, 0)
        window = self._searched(params, sort, limit + offset - start, start)
        newest = sort == "newest"
        merged = sorted([*window, by_id], key=lambda task: task.id, reverse=newest)
        if offset == 0:
            return merged[:limit]
        if not window or (by_id.id > window[0].id) == newest:
            return window[:limit]  # it sorts before the page: the page is one row later
        return merged[1:limit + 1]

    def count_filtered_tasks(self, wanted: TaskFilter, cap: int) -> int:
        params = _filter_params(wanted) | {"cap": cap}
        if params["trigrams"] is None:
            return int(self._all("count_filtered_tasks", params)[0]["n"])
        self._catch_up_text_index()
        counted = int(self._all("count_searched_tasks", params)[0]["n"])
        return min(counted + (self._task_by_number(wanted) is not None), cap)

    def _searched(self, params: dict[str, Any], sort: str, limit: int, offset: int
                  ) -> list[Task]:
        self._catch_up_text_index()
        rows = self._all(f"search_tasks_{sort}", params | {
            "limit": limit, "offset": offset, "window": limit + offset})
        return [Task.from_row(row) for row in rows]

    def _catch_up_text_index(self) -> None:
        """Before a search through the index: a store whose index takes tasks in batches
        (SQLite) indexes a long tail of tasks it does not hold yet."""

    def _task_by_number(self, wanted: TaskFilter) -> Task | None:
        """The task a text of digits names by its id, if it passes the other filters and its
        own text does not hold the digits (then the index finds it among the matches)."""
        number = _as_id(wanted.text)
        if number is None or wanted.text is None:
            return None
        found = self.filter_tasks(replace(wanted, text=f"#{number}"), limit=1)
        digits = wanted.text.lower()  # digits alone: the same in any case, in any database
        if not found or digits in found[0].title.lower() or digits in found[0].prompt.lower():
            return None
        return found[0]

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
    text_id = _as_id(text)
    searched = text is not None and not only_id
    trigrams = trigram_query(text) if searched and text is not None else None
    # The trigram index serves the whole history and the finished states; an open state is
    # read through its own small index.
    indexed = trigrams is not None and state not in OPEN_STATES
    return {
        "state": state.value if state else None,
        "role": wanted.role, "priority": wanted.priority, "node": wanted.node,
        "job": wanted.job,
        "only_id": only_id,
        "pattern": None if text is None or only_id else f"%{_escaped(text.lower())}%",
        "trigrams": trigrams if indexed else None,
        "short_scan": SHORT_SCAN if searched and trigrams is None else None,
        "text_id": text_id,
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
