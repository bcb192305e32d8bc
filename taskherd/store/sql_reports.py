"""Read-only aggregates for boards and reports, computed by the database (GROUP BY), never by
reading every row into Python."""

from __future__ import annotations

from typing import Any

# The sums come back as the dialect's numeric types (PostgreSQL: Decimal for a bigint sum);
# a report wants plain ints and floats.
_INTS = ("runs_week", "input_tokens_week", "output_tokens_week", "runs_today",
         "input_tokens_today", "output_tokens_today")
_FLOATS = ("cost_week", "cost_today")


class SQLReports:
    def _all(self, name: str, params: Any = ...) -> list[Any]:  # provided by SQLStore
        raise NotImplementedError

    def spend_by_role(self, week_start: float, day_start: float) -> list[dict[str, Any]]:
        """Per role: runs and cost since week_start, and runs, cost and tokens since day_start."""
        rows = self._all("spend_by_role", {"week_start": week_start, "day_start": day_start})
        return [{"role": row["role"], **{key: int(row[key]) for key in _INTS},
                 **{key: float(row[key]) for key in _FLOATS}} for row in rows]
