"""The report store interface: the reads behind `taskherd runs`, the board, budgets and
/metrics (sums over runs and the hourly roll-up; the SQL is in `sql_reports.py`). `Store`
inherits it."""

from __future__ import annotations

import abc
from typing import Any

from taskherd.model import Task


class ReportStore(abc.ABC):
    @abc.abstractmethod
    def cost_by_day(self, day_starts: list[float], since: float) -> list[dict[str, Any]]:
        """Runs and cost per day (each day starting at one of `day_starts`) since `since`."""

    @abc.abstractmethod
    def task_history(self, *, since: float, role: str | None = None,
                     limit: int = 100) -> list[Task]:
        """Finished tasks (completed, dead, cancelled), newest first, finished since `since`."""

    @abc.abstractmethod
    def first_run_start(self) -> float | None:
        """When the oldest run still kept was claimed (None: no runs)."""

    @abc.abstractmethod
    def spend_by_role(self, week_start: float, day_start: float) -> list[dict[str, Any]]:
        """Per role: runs and cost since week_start, and runs, cost and tokens since day_start."""

    @abc.abstractmethod
    def run_timing(self, run_id: int) -> dict[str, Any] | None:
        """A run's role, claim, spawn and end times, outcome, and its task's ready time."""

    @abc.abstractmethod
    def run_totals(self) -> list[dict[str, Any]]:
        """Per role and outcome: runs, cost and tokens of every run that ended, and the runs
        open now (outcome None)."""

    @abc.abstractmethod
    def spend_since(self, since: float) -> list[dict[str, Any]]:
        """Runs and cost per role since `since`, as rows of a moment and what was spent then."""

    @abc.abstractmethod
    def budget_spend(self, month_start: float, day_start: float) -> list[dict[str, Any]]:
        """Per role: cost, unknown-cost runs, open runs and tokens this month and today."""
