"""Read-only aggregates for boards and reports, computed by the database (GROUP BY), never by
reading every row into Python."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from taskherd.model import Task

# The sums come back as the dialect's numeric types (PostgreSQL: Decimal for a bigint sum);
# a report wants plain ints and floats.
_INTS = ("runs_week", "input_tokens_week", "output_tokens_week", "runs_today",
         "input_tokens_today", "output_tokens_today", "unpriced_week", "unpriced_today")
_FLOATS = ("cost_week", "cost_today")


class SQLReports:
    def _all(self, name: str, params: Any = ...) -> list[Any]:  # provided by SQLStore
        raise NotImplementedError

    def _past_the_marks(self, read: Callable[[Any], list[Any]]) -> list[Any]:  # by SQLStore
        raise NotImplementedError

    def cost_by_day(self, day_starts: list[float], since: float) -> list[dict[str, Any]]:
        """Per day (given by the starts of the days, ascending): runs, cost and tokens of the
        runs started since `since`; each row names its day by `day_start`."""
        rows = self._all("cost_by_day", {"starts": json.dumps(day_starts), "since": since})
        return [{"day_start": float(row["day_start"]), "runs": int(row["runs"]),
                 "cost_usd": float(row["cost_usd"]), "input_tokens": int(row["input_tokens"]),
                 "output_tokens": int(row["output_tokens"]),
                 "unpriced_runs": int(row["unpriced_runs"])}
                for row in rows if row["day_start"] is not None]

    def waiting_at_priority(self, priority: int, *, limit: int = 50) -> list[Task]:
        """Ready tasks of `priority` in claim order, then those pending approval, oldest
        first: at most `limit` of each, read through indexes whatever the history's size."""
        return [Task.from_row(row) for row in self._all(
            "waiting_at_priority", {"priority": int(priority), "limit": limit})]

    def task_history(self, *, since: float, role: str | None = None,
                     limit: int = 100) -> list[Task]:
        """Finished tasks (completed, dead, cancelled), newest first, finished since `since`."""
        params = {"since": since, "role": role, "limit": limit}
        return [Task.from_row(row) for row in self._all("task_history", params)]

    def first_run_start(self) -> float | None:
        """When the oldest run still kept was claimed (None: no runs)."""
        [row] = self._all("first_run_start")
        return None if row["first"] is None else float(row["first"])

    def spend_by_role(self, week_start: float, day_start: float) -> list[dict[str, Any]]:
        """Per role: runs and cost since week_start, and runs, cost and tokens since day_start."""
        # Spend is summed by the hour: each window starts at the hour holding its start.
        hours = {"week_from": _hour_holding(week_start), "day_from": _hour_holding(day_start)}
        rows = self._past_the_marks(
            lambda marks: self._all("spend_by_role",
                                    hours | {"runs_through": marks["runs_through"]}))
        return [{"role": row["role"], **{key: int(row[key]) for key in _INTS},
                 **{key: float(row[key]) for key in _FLOATS}} for row in rows]

    def run_timing(self, run_id: int) -> dict[str, Any] | None:
        """A run's role, claim, spawn and end times, outcome, and its task's ready time (None
        if the task was pruned): what /metrics observes of it."""
        rows = self._all("run_timing", {"id": run_id})
        return dict(rows[0]) if rows else None

    def run_totals(self) -> list[dict[str, Any]]:
        """Per role and outcome: runs, cost and tokens of every run that ended, the pruned
        ones included; and per role, the runs open now (outcome None). For /metrics."""
        return [{"role": row["role"], "outcome": row["outcome"], "runs": int(row["runs"]),
                 "cost_usd": float(row["cost_usd"]), "input_tokens": int(row["input_tokens"]),
                 "output_tokens": int(row["output_tokens"]), "unpriced": int(row["unpriced"])}
                for row in self._all("run_totals")]

    def spend_since(self, since: float) -> list[dict[str, Any]]:
        """Runs and cost per role since `since`, as rows of a moment (`at`: an hour's start for
        rolled-up hours, a claim for runs past the roll-up) and what was spent then."""
        return [{"role": row["role"], "at": float(row["at"]), "runs": int(row["runs"]),
                 "cost_usd": float(row["cost_usd"]), "unpriced": int(row["unpriced"])}
                for row in self._all("spend_hours_since", {"since": since})]
    def budget_spend(self, month_start: float, day_start: float) -> list[dict[str, Any]]:
        """Per role: cost, unknown-cost runs, open runs and tokens since month_start and since
        day_start, and the number of priced runs this month (budget_spend in reports.sql)."""
        params = {"month_start": month_start, "day_start": day_start, "role": None}
        return budget_rows(self._all("budget_spend", params))


def budget_rows(rows: list[Any]) -> list[dict[str, Any]]:
    """budget_spend's rows as budgets.py reads them (PostgreSQL's sums are Decimals)."""
    return [{"role": row["role"],
             **{key: float(row[key]) for key in ("cost_day", "cost_month")},
             **{key: int(row[key]) for key in _BUDGET_INTS}} for row in rows]


_BUDGET_INTS = ("unknown_day", "open_day", "tokens_day", "unknown_month", "open_month",
                "tokens_month", "priced_month")


def _hour_holding(moment: float) -> float:
    """The start of the UTC hour `moment` falls in (an infinite bound stays one)."""
    return moment if math.isinf(moment) else moment // 3600 * 3600
