"""The limits a claim must fit, counted across every node that shares the database.

A role's `max_concurrent` and `stagger`, a pool's capacity and a runtime's cooldown hold for
the whole fleet: two nodes each running "the one deployer allowed" is the overlap they exist
to prevent. A role or pool with `scope = "node"` is counted on the claiming node alone (a GPU
on each machine). The node's own `max_concurrent` is its own business (the dispatcher's).

A budget holds for the whole fleet too: a role with a `budget` (or any role, under a fleet's
`[budgets]` limit) is claimed only while the spend its runs have committed leaves room for one
more, counted in the claim's transaction; roles without one pay nothing for it.

Pure: the terms of the limits, as the config states them. Whether a run fits them is
policy/admission.py's rule: the store counts, inside the claim's transaction and under the
lock that orders claims (PostgreSQL) or the write lock (SQLite), reads a budgeted role's
spend (`budget_pauses`), and asks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from datetime import tzinfo
from functools import cached_property
from typing import TYPE_CHECKING, Any

from taskherd.model import settings
from taskherd.model.record import Record
from taskherd.model.settings import FLEET, Budgets, Limits
from taskherd.policy import budgets
from taskherd.policy.budgets import Pause, Periods

if TYPE_CHECKING:
    from taskherd.model.settings import Config

# The scopes are settings' words (the config and the store read them without these rules).
CLUSTER, NODE, SCOPES = settings.CLUSTER, settings.NODE, settings.SCOPES


class RoleLimit(Record):
    max_concurrent: int | None = None
    stagger: float = 0.0
    scope: str = CLUSTER
    pool: str | None = None
    runtime: str | None = None
    tags: tuple[str, ...] = ()  # the node tags a run of the role needs


class PoolLimit(Record):
    capacity: int
    scope: str = CLUSTER


class ClaimLimits(Record):
    roles: Mapping[str, RoleLimit] = field(default_factory=dict)
    pools: Mapping[str, PoolLimit] = field(default_factory=dict)
    budgets: Budgets = field(default_factory=Budgets)
    zone: tzinfo | None = None  # the fleet's, in which budget days and months begin

    @classmethod
    def from_config(cls, config: Config) -> ClaimLimits:
        from taskherd.policy.timefmt import reading_zone

        roles = {name: RoleLimit(role.max_concurrent, role.stagger, role.scope, role.pool,
                                 role.runtime, tuple(role.nodes))
                 for name, role in config.roles.items()}
        pools = {name: PoolLimit(capacity, config.pool_scopes.get(name, CLUSTER))
                 for name, capacity in config.pools.items()}
        zone = reading_zone(config.daemon.timezone) if config.budgets else None
        return cls(roles, pools, config.budgets, zone)

    def budget_scopes(self, role: str) -> tuple[str, ...]:
        """The budgets a run of `role` spends from: its own and the fleet's, those limited."""
        return self._budget_scopes.get(role, self._fleet_scope)

    @cached_property
    def _budget_scopes(self) -> dict[str, tuple[str, ...]]:
        # Worked out once per ClaimLimits (a dispatch pass), not at every claim.
        return {name: (name, *self._fleet_scope)
                for name, limits in self.budgets.roles.items() if limits}

    @cached_property
    def _fleet_scope(self) -> tuple[str, ...]:
        return (FLEET,) if self.budgets.fleet else ()

    def budget_periods(self, now: float) -> Periods:
        assert self.zone is not None, "budgets without the fleet's zone"
        return budgets.periods(now, self.zone)

    def budget_pauses(self, role: str, rows: Sequence[Mapping[str, Any]],
                      span: Periods) -> dict[str, Pause]:
        """The budgets of `role` (its own, the fleet's) with no room for one more run in the
        day and month of `span`, given the spend `rows` (the store's budget_spend, read in
        the claim's transaction), by scope."""
        scopes = self.budget_scopes(role)
        # Only this role's budgets: another role's spent budget is not this claim's concern.
        wanted = Budgets(
            self.budgets.fleet if FLEET in scopes else Limits(),
            {role: self.budgets.roles[role]} if role in scopes else {},
            self.budgets.unknown_run_usd, self.budgets.run_estimate_usd)
        paused = budgets.pauses(budgets.lines(wanted, rows, span))
        return {scope: paused[scope] for scope in scopes if scope in paused}

    def role(self, name: str) -> RoleLimit:
        return self.roles.get(name) or RoleLimit()

    def pools_of(self, role: str, task_pool: str | None) -> tuple[str, ...]:
        """The limited pools a run of `role` for a task in `task_pool` takes a place in."""
        named = (self.role(role).pool, task_pool)
        return tuple(dict.fromkeys(p for p in named if p is not None and p in self.pools))

    def crosses_nodes(self, role: str, task_pool: str | None) -> bool:
        """Whether the check counts other nodes' runs, so claims must be ordered across nodes."""
        if self.budget_scopes(role):
            return True  # a budget is the fleet's, whatever the role's scope
        return self.role_counted_across_nodes(role) or any(
            self.pools[pool].scope == CLUSTER for pool in self.pools_of(role, task_pool))

    def role_counted_across_nodes(self, role: str) -> bool:
        """Whether the role's own limits (max_concurrent, stagger) count every node's runs."""
        limit = self.role(role)
        limited = limit.max_concurrent is not None or limit.stagger > 0
        return limited and limit.scope == CLUSTER
