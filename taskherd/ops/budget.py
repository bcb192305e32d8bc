"""Budgets at work: each scope's spend against its limits (`taskherd budget status`), and the
pauses the dispatcher keeps in step with them (budgets.py holds the rules)."""

from __future__ import annotations

import logging
from typing import Any

from taskherd.model import Cooldown
from taskherd.model.delivery import BUDGET_PAUSED, BUDGET_RESUMED, DEFAULT_ROLE_EVENTS
from taskherd.model.settings import FLEET, Config
from taskherd.policy import budgets
from taskherd.policy.timefmt import reading_zone
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


def apply_budget_pauses(config: Config, store: Store, now: float,
                        cooldowns: list[Cooldown] | None = None) -> dict[str, budgets.Pause]:
    """Keep the budget pauses (`budget:ROLE`, `budget:fleet`) in step with the spend: begin
    one for each scope that may not start another run, lift those whose scope has room again
    (a raised limit, a new day). The claim is what holds a spent budget, on every node; a
    pause is what people and delivery targets are told, once per pause (the store's
    transitions make sure of that). `cooldowns` are the store's, if the caller read them.
    Returns the pauses, by scope."""
    paused = budgets.pauses(budget_lines(config, store, now))
    current = {c.runtime: c for c in (store.all_cooldowns() if cooldowns is None else cooldowns)
               if c.runtime.startswith(budgets.COOLDOWN_PREFIX)}
    for pause in paused.values():
        note_pause(config, store, pause, now, current.get(pause.cooldown_name))
    wanted = {pause.cooldown_name for pause in paused.values()}
    for name in set(current) - wanted:
        scope = name.removeprefix(budgets.COOLDOWN_PREFIX)
        targets = budget_targets(config, scope, BUDGET_RESUMED)
        if store.lift_budget_pause(scope, current[name].until, targets, now):
            log.info("%s: within budget again, spawns resume", name)
    return paused


def note_pause(config: Config, store: Store, pause: budgets.Pause, now: float,
               existing: Cooldown | None = None) -> None:
    """Record `pause` (a spent budget the dispatcher found, or a claim refused), unless the
    pause `existing` already holds it; the store tells the targets if it began one."""
    if existing is not None and existing.active(now) and existing.until >= pause.until:
        return  # already paused: no write, and nobody is told twice
    targets = budget_targets(config, pause.scope, BUDGET_PAUSED)
    if store.pause_budget(pause.scope, pause.until, pause.reason, targets, now):
        log.warning("%s: spawns paused until the period resets (%s)", pause.scope,
                    pause.reason)


def budget_targets(config: Config, scope: str, event: str) -> list[str]:
    """The delivery aliases told of `event` for `scope`: the role's `deliver_to` when its
    `on` names the event (budget_paused is among the defaults, budget_resumed is asked for);
    for the fleet's budget, every role's (each alias once)."""
    roles = (list(config.roles.values()) if scope == FLEET
             else [config.roles[scope]] if scope in config.roles else [])
    aliases = [alias.removeprefix("@") for role in roles
               if event in (role.deliver_on or DEFAULT_ROLE_EVENTS) for alias in role.deliver_to]
    return list(dict.fromkeys(aliases))
