"""Budgets at work: each scope's spend against its limits (`taskherd budget status`), and the
pauses the dispatcher keeps in step with them (budgets.py holds the rules)."""

from __future__ import annotations

import logging
from typing import Any

from taskherd import budgets
from taskherd.config import Config
from taskherd.runtimes.ratelimit import reading_zone
from taskherd.store import Store

log = logging.getLogger("taskherd.budgets")


def budget_lines(config: Config, store: Store, now: float) -> list[budgets.Line]:
    """Every limit of every scope, against what was spent in its period."""
    if not config.budgets:
        return []
    span = budgets.periods(now, reading_zone(config.daemon.timezone))
    rows = store.budget_spend(span.month_start, span.day_start)
    return budgets.lines(config.budgets, rows, span)


def budget_status(config: Config, store: Store, now: float) -> dict[str, Any]:
    """What `taskherd budget status` shows, as data."""
    lines = budget_lines(config, store, now)
    return {
        "limits": [line.as_dict() for line in lines],
        "paused": [pause.__dict__ for pause in budgets.pauses(lines).values()],
        "unknown_run_usd": config.budgets.unknown_run_usd,
        "run_estimate_usd": config.budgets.run_estimate_usd,
    }


def apply_budget_pauses(config: Config, store: Store, now: float) -> dict[str, float]:
    """Keep the budget cooldowns (`budget:ROLE`, `budget:fleet`) in step with the spend: set
    one for each scope that may not start another run (its event tells every listener),
    clear those whose scope has room again (a raised limit, a new day). Returns the paused
    scopes and until when."""
    paused = budgets.pauses(budget_lines(config, store, now))
    # Every budget row, lifted ones too: a cooldown row now stays until cleared.
    current = {c.runtime: c for c in store.all_cooldowns()
               if c.runtime.startswith(budgets.COOLDOWN_PREFIX)}
    for pause in paused.values():
        existing = current.get(pause.cooldown_name)
        if existing is None or existing.until != pause.until:
            if existing is None:
                log.warning("%s: spawns paused until the period resets (%s)", pause.scope,
                            pause.reason)
            store.set_cooldown(pause.cooldown_name, pause.until, pause.reason, now)
    wanted = {pause.cooldown_name for pause in paused.values()}
    for name in set(current) - wanted:
        log.info("%s: within budget again, spawns resume", name)
        store.clear_cooldown(name, now)
    return {scope: pause.until for scope, pause in paused.items()}
