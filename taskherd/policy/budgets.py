"""Spending budgets: how much a role (or the whole fleet) may spend per day and per month,
and whether one more run still fits. Pure: the caller passes the spend and `now`.

A spawn is allowed only while what was spent, plus what the runs still going are expected to
cost, plus what this run is expected to cost, stays within every limit; so with a $1 limit
and runs that cost $0.30, three runs start and the fourth never does. A run is expected to
cost the mean of the role's priced runs this month, else `budgets.run_estimate_usd`. A run
whose cost is unknown (a command that reports none, a model without a price) counts at
`budgets.unknown_run_usd`; without one it counts as $0, and `taskherd budget status` says so.
Periods are calendar days and months in the fleet's zone: a pause lasts until the next one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from typing import Any

from taskherd.model.record import Record
from taskherd.model.settings import BUDGET_COOLDOWN, FLEET, Budgets

COOLDOWN_PREFIX = BUDGET_COOLDOWN  # a budget pause is a cooldown named budget:ROLE or budget:fleet


class Spend(Record):
    """One scope's spend in one period, from the store (budget_spend)."""

    cost: float = 0.0  # known cost
    unknown_runs: int = 0
    open_runs: int = 0
    tokens: int = 0

    def plus(self, other: Spend) -> Spend:
        return Spend(self.cost + other.cost, self.unknown_runs + other.unknown_runs,
                     self.open_runs + other.open_runs, self.tokens + other.tokens)


class Periods(Record):
    day_start: float
    next_day: float
    month_start: float
    next_month: float


class Line(Record):
    """One limit of one scope as `budget status` shows it."""

    scope: str
    period: str  # "day" or "month"
    unit: str  # "usd" or "tokens"
    limit: float
    spent: float  # counting unknown-cost runs at their estimate
    committed: float  # spent + the open runs at their expected cost
    expected_next: float  # what one more run is expected to add
    resets_at: float
    unknown_runs: int
    unknown_counted_as: float | None

    @property
    def allows_another(self) -> bool:
        if self.unit == "tokens":  # a run's tokens are not known before it ends
            return self.committed < self.limit
        return self.committed + self.expected_next <= self.limit + 1e-9

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "allows_another": self.allows_another}


class Pause(Record):
    """Spawns of `scope` wait until `until`, for `reason`."""

    scope: str
    until: float
    reason: str

    @property
    def cooldown_name(self) -> str:
        return COOLDOWN_PREFIX + self.scope


def periods(now: float, zone: tzinfo) -> Periods:
    """The day and the month `now` falls in, in `zone` (a ZoneInfo: a day across a daylight
    saving change lasts 23 or 25 hours)."""
    today = datetime.fromtimestamp(now, zone).date()
    tomorrow = today + timedelta(days=1)
    first = today.replace(day=1)
    next_first = (first.replace(year=first.year + 1, month=1) if first.month == 12
                  else first.replace(month=first.month + 1))
    return Periods(*(datetime(d.year, d.month, d.day, tzinfo=zone).timestamp()
                     for d in (today, tomorrow, first, next_first)))


def lines(budgets: Budgets, rows: Sequence[Mapping[str, Any]], span: Periods) -> list[Line]:
    """Every limit of every scope against its spend; `rows` are the store's budget_spend."""
    by_role = {row["role"]: row for row in rows}
    result = []
    for scope, limits in budgets.scopes().items():
        scope_rows = list(by_role.values()) if scope == FLEET else \
            [by_role[scope]] if scope in by_role else []
        for period, resets_at in (("day", span.next_day), ("month", span.next_month)):
            spend = _spend(scope_rows, period)
            expected = _expected_run_cost(budgets, scope_rows)
            usd = limits.daily_usd if period == "day" else limits.monthly_usd
            tokens = limits.daily_tokens if period == "day" else limits.monthly_tokens
            unknown_as = budgets.unknown_run_usd
            if usd is not None:
                spent = spend.cost + spend.unknown_runs * (unknown_as or 0.0)
                result.append(Line(scope, period, "usd", usd, spent,
                                   spent + spend.open_runs * expected, expected, resets_at,
                                   spend.unknown_runs, unknown_as))
            if tokens is not None:
                result.append(Line(scope, period, "tokens", tokens, spend.tokens, spend.tokens,
                                   0.0, resets_at, spend.unknown_runs, None))
    return result


def pauses(all_lines: list[Line]) -> dict[str, Pause]:
    """The scopes that may not start another run, each until its latest reset among the
    limits it is at (a month's limit outlasts the day's)."""
    found: dict[str, Pause] = {}
    for line in all_lines:
        if line.allows_another:
            continue
        reason = (f"budget: {line.scope} {_period_word(line.period)} limit "
                  f"{_amount(line.limit, line.unit)} reached "
                  f"({_amount(line.committed, line.unit)} spent or running"
                  + (f", next run ~{_amount(line.expected_next, line.unit)}"
                     if line.expected_next else "") + ")")
        current = found.get(line.scope)
        if current is None or line.resets_at > current.until:
            found[line.scope] = Pause(line.scope, line.resets_at, reason)
    return found


def _spend(rows: Sequence[Mapping[str, Any]], period: str) -> Spend:
    total = Spend()
    for row in rows:
        total = total.plus(Spend(row[f"cost_{period}"], row[f"unknown_{period}"],
                                 row[f"open_{period}"], row[f"tokens_{period}"]))
    return total


def _expected_run_cost(budgets: Budgets, rows: Sequence[Mapping[str, Any]]) -> float:
    priced = sum(row["priced_month"] for row in rows)
    if priced:
        return float(sum(row["cost_month"] for row in rows) / priced)
    return budgets.run_estimate_usd or budgets.unknown_run_usd or 0.0


def _period_word(period: str) -> str:
    return "daily" if period == "day" else "monthly"


def _amount(value: float, unit: str) -> str:
    return f"${value:,.2f}" if unit == "usd" else f"{int(value):,} tokens"
