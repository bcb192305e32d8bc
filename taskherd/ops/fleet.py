"""The fleet at a glance: each node with the agents it runs, each role's and pool's slots in
use across the fleet, and the pauses that hold runs back (cooldowns, budget pauses) with
their reasons and ends. What the dashboard's nodes page shows, as data."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from taskherd.ops import Queue
from taskherd.policy.budgets import COOLDOWN_PREFIX


def fleet(queue: Queue, now: float) -> dict[str, Any]:
    """`nodes`: every node known, each with its status and its open runs by role;
    `roles` and `pools`: slots in use over every node, of their limit (None: no limit),
    counted for the fleet (scope cluster) or for each node alone (scope node);
    `cooldowns` and `budget_pauses`: the active ones, soonest end first."""
    store, config = queue.store, queue.config
    open_runs = store.open_runs()
    by_node: dict[str, Counter[str]] = defaultdict(Counter)
    for run in open_runs:
        by_node[run.node][run.role] += 1
    nodes = [node.to_dict() | {"status": node.status(now),
                               "agents": dict(sorted(by_node[node.name].items()))}
             for node in store.list_nodes()]
    running = Counter(run.role for run in open_runs)
    roles: list[dict[str, Any]] = [
        {"role": name, "running": running[name], "limit": role.max_concurrent,
         "scope": role.scope, "pool": role.pool}
        for name in sorted(set(config.roles) | set(running))
        for role in [config.role(name)]]
    pool_use: Counter[str] = Counter()
    for row in roles:
        if row["pool"] is not None:
            pool_use[row["pool"]] += row["running"]
    pools = [{"pool": name, "running": pool_use[name], "limit": config.pools.get(name),
              "scope": config.pool_scopes.get(name, "cluster")}
             for name in sorted(set(config.pools) | set(pool_use))]
    active = sorted((c for c in store.all_cooldowns() if c.until > now),
                    key=lambda c: c.until)
    return {
        "nodes": nodes, "roles": roles, "pools": pools,
        "cooldowns": [_pause(c) for c in active if not c.runtime.startswith(COOLDOWN_PREFIX)],
        "budget_pauses": [_pause(c) | {"scope": c.runtime.removeprefix(COOLDOWN_PREFIX)}
                          for c in active if c.runtime.startswith(COOLDOWN_PREFIX)],
    }


def _pause(cooldown: Any) -> dict[str, Any]:
    return {"name": cooldown.runtime, "since": cooldown.created_at, "until": cooldown.until,
            "reason": cooldown.reason}
