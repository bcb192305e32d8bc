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
         "input_tokens_today", "output_tokens_today")
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
                 "output_tokens": int(row["output_tokens"])}
                for row in rows if row["day_start"] is not None]

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


def _hour_holding(moment: float) -> float:
    """The start of the UTC hour `moment` falls in (an infinite bound stays one)."""
    return moment if math.isinf(moment) else moment // 3600 * 3600
