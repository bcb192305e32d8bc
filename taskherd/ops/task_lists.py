"""Lists of tasks by any filter, as a person asks for them (the dashboard's query string), and
what is done to many of them at once.

A filter arrives as text (`?state=dead&role=coder&page=2`): every key and value is checked
here and a wrong one refused with its reason (BadInput), so a bookmarked list either shows
what it says or says why not. Reads go through `Store.filter_tasks`; the total is exact when
the board's own counts give it (state and role only) and counted up to COUNT_CAP otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field, replace
from datetime import datetime
from typing import Any

from taskherd.model import OPEN_STATES, TaskState
from taskherd.model.record import Record
from taskherd.ops import BadInput, Queue
from taskherd.ops import board as board_ops
from taskherd.ops import tasks as task_ops
from taskherd.policy.timefmt import zone_named
from taskherd.store import StoreError
from taskherd.store.task_lists import SORTS, TaskFilter

PER_PAGE = (25, 50, 100, 200)
COUNT_CAP = 1000
MAX_OFFSET = 100_000  # deeper than a person pages: a narrower filter finds it sooner
MAX_TEXT = 200
BULK_MAX = 1000
BULK_ACTIONS = ("requeue", "cancel", "approve", "unblock")
# Keys the dashboard adds to a page's address for its own use, not filters.
PAGE_KEYS = {"fragment", "seen"}
FILTER_KEYS = ("state", "role", "priority", "node", "job", "q", "finished_from", "finished_to")


class ListQuery(Record):
    """A list as asked: the filter, the order and the page (1 is the first)."""

    wanted: TaskFilter = field(default_factory=TaskFilter)
    sort: str = "newest"
    page: int = 1
    per_page: int = 50
    given: tuple[tuple[str, str], ...] = ()  # the filter's keys as written, for the links

    def only_state_and_role(self) -> bool:
        return replace(self.wanted, state=None, role=None) == TaskFilter()


def parse_query(queue: Queue, params: Iterable[tuple[str, str]]) -> ListQuery:
    """The list a query string asks for; BadInput naming the first key or value that is
    wrong (an unknown key, a state that does not exist, a page that is not a number…)."""
    seen: dict[str, str] = {}
    for key, value in params:
        if key in PAGE_KEYS:
            continue
        if key not in (*FILTER_KEYS, "sort", "page", "per_page"):
            raise BadInput(f"{key!r} is not a filter of the task list: use "
                           f"{', '.join((*FILTER_KEYS, 'sort', 'page', 'per_page'))}")
        if key in seen:
            raise BadInput(f"{key!r} is given twice: give each filter once")
        seen[key] = value.strip()
    given = {key: value for key, value in seen.items() if value and key in FILTER_KEYS}
    zone = zone_named(queue.config.daemon.timezone)
    wanted = TaskFilter(
        state=task_ops.task_state(given["state"]) if "state" in given else None,
        role=_text("role", given.get("role")), priority=_priority(given.get("priority")),
        node=_text("node", given.get("node")), job=_text("job", given.get("job")),
        text=_text("q", given.get("q")),
        finished_from=_moment("finished_from", given.get("finished_from"), zone),
        finished_to=_moment("finished_to", given.get("finished_to"), zone))
    if (wanted.finished_from is not None and wanted.finished_to is not None
            and wanted.finished_from >= wanted.finished_to):
        raise BadInput("finished_from is not before finished_to: the range is empty")
    sort = seen.get("sort") or "newest"
    if sort not in SORTS:
        raise BadInput(f"sort = {sort!r}: expected one of {', '.join(SORTS)}")
    if sort == "priority" and wanted.state not in OPEN_STATES:
        # The open states are read through their own indexes; a sort of the whole history
        # by priority would read a million rows for a page, and order nothing of use.
        raise BadInput("sort = 'priority' orders the tasks of one open state: choose a "
                       "state (ready, pending, …) or sort by newest or oldest")
    per_page = _whole("per_page", seen.get("per_page") or "50", 1, max(PER_PAGE))
    page = _whole("page", seen.get("page") or "1", 1, MAX_OFFSET // per_page + 1)
    return ListQuery(wanted, sort, page, per_page, tuple(given.items()))


def find(queue: Queue, asked: ListQuery) -> dict[str, Any]:
    """The page of tasks `asked` for, and how many match: `total` (exact, or the cap when
    `total_exact` is False: "more than")."""
    offset = (asked.page - 1) * asked.per_page
    found = queue.store.filter_tasks(asked.wanted, sort=asked.sort, limit=asked.per_page,
                                     offset=offset)
    if len(found) < asked.per_page and (found or offset == 0):
        total, exact = offset + len(found), True  # the last page: no count need read more
    else:
        total, exact = _total(queue, asked)
    if not exact and offset + len(found) >= total:  # paged past the cap: at least this many
        total = offset + len(found)
    return {"tasks": found, "total": total, "total_exact": exact,
            "more": len(found) == asked.per_page and (offset + len(found) < total or not exact)}


def _total(queue: Queue, asked: ListQuery) -> tuple[int, bool]:
    if asked.only_state_and_role():
        # The board's counts: read through indexes and rollups, exact at a million tasks.
        by_role, totals = board_ops.state_counts(queue)
        counts = by_role.get(asked.wanted.role, {}) if asked.wanted.role else totals
        states = [asked.wanted.state] if asked.wanted.state else list(TaskState)
        return sum(counts.get(state.value, 0) for state in states), True
    counted = queue.store.count_filtered_tasks(asked.wanted, COUNT_CAP + 1)
    return (counted, True) if counted <= COUNT_CAP else (COUNT_CAP, False)


def matching_ids(queue: Queue, asked: ListQuery) -> list[int]:
    """The ids of every task `asked` matches, for a bulk action (BULK_MAX at most: refused
    past it, so a confirmation never says less than what would be done)."""
    found = queue.store.filter_tasks(asked.wanted, sort="oldest", limit=BULK_MAX + 1)
    if len(found) > BULK_MAX:
        raise BadInput(f"more than {BULK_MAX} tasks match: narrow the filter, or act on them "
                       f"{BULK_MAX} at a time")
    return [task.id for task in found]


def bulk(queue: Queue, action: str, task_ids: Iterable[int], now: float,
         reason: str | None = None) -> dict[str, Any]:
    """`action` on each task, each its own transition (the operation the CLI's `task ACTION`
    runs): the ones done, and the ones refused with the reason (a task that moved meanwhile)."""
    if action not in BULK_ACTIONS:
        raise BadInput(f"action {action!r}: expected one of {', '.join(BULK_ACTIONS)}")
    ids = list(dict.fromkeys(task_ids))
    if not ids:
        raise BadInput("no task chosen: tick the tasks to act on, or act on all that match")
    if len(ids) > BULK_MAX:
        raise BadInput(f"{len(ids)} tasks: at most {BULK_MAX} at once")
    move = task_ops.TRANSITIONS[action]
    done, refused = [], []
    for task_id in ids:
        try:
            move(queue, task_id, now, reason) if action == "cancel" else move(queue, task_id, now)
            done.append(task_id)
        except StoreError as error:
            refused.append((task_id, str(error)))
    return {"done": done, "refused": refused}


def _text(key: str, value: str | None) -> str | None:
    if value is None:
        return None
    if len(value) > MAX_TEXT:
        raise BadInput(f"{key}: {len(value)} characters; at most {MAX_TEXT}")
    return value


def _priority(value: str | None) -> int | None:
    if value is None:
        return None
    digits = value.upper().removeprefix("P")
    if digits not in ("0", "1", "2", "3"):
        raise BadInput(f"priority = {value!r}: expected 0, 1, 2 or 3 (P0 is the most urgent)")
    return int(digits)


def _whole(key: str, value: str, low: int, high: int) -> int:
    if not value.isdigit() or not low <= int(value) <= high:
        raise BadInput(f"{key} = {value!r}: expected a whole number from {low} to {high}")
    return int(value)


def _moment(key: str, value: str | None, zone: Any) -> float | None:
    """A date or a date and time (as a browser's date and datetime-local fields send them),
    in the fleet's zone unless it names its own."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadInput(f"{key} = {value!r}: expected a date, e.g. 2026-05-01 or "
                       f"2026-05-01T14:30") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone) if zone else moment.astimezone()
    return moment.timestamp()
