"""How a sum of cost is stated when some of its runs' cost is unknown.

A run whose cost is unknown (a command that reports none, a model without a price) is never
summed as $0: every total carries the count of such runs beside the dollars it knows. In
JSON, `cost_usd` is the known dollars and `unpriced_runs` the runs left out; `cost_usd` is
null when nothing was known to cost anything and some runs' cost is unknown (no "$0" for
work of unknown price). In text: "$1.2000 + 5 runs of unknown cost", "unknown (5 runs)".
"""

from __future__ import annotations

from taskherd.model import Outcome, Run


def known_cost(dollars: float, unpriced: int) -> float | None:
    """The known dollars of a sum, or None when it knows of nothing but unpriced runs."""
    return None if unpriced and not dollars else dollars


def cost_text(dollars: float | None, unpriced: int) -> str:
    """A sum of cost in words, naming the runs it could not price."""
    runs = f"{unpriced} run{'' if unpriced == 1 else 's'}"
    if not unpriced:
        return f"${dollars or 0.0:.4f}"
    if not dollars:
        return f"unknown ({runs})"
    return f"${dollars:.4f} + {runs} of unknown cost"


def is_unpriced(run: Run) -> bool:
    """A run whose cost is unknown: it ended without one after its agent started, and was not
    stopped by a rate limit (which fails before any paid work). As the store's SQL says it
    (migration 0032, budget_spend)."""
    return (run.ended_at is not None and run.cost_usd is None and run.spawned_at is not None
            and run.outcome is not Outcome.RATE_LIMITED)
