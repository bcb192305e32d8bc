"""The status board: tasks by state and role, cooldowns, nodes, and what each role spent."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from taskherd.model import Run, TaskState
from taskherd.ops import Queue
from taskherd.store.nodes import Node

WEEK = 7 * 86400


def status_board(queue: Queue, now: float) -> dict[str, Any]:
    """Everything `taskherd status` shows, as data: counts by role and state (every state
    present, zero when none) with totals, active cooldowns, nodes, and spend by role."""
    store = queue.store
    by_role: dict[str, dict[str, int]] = defaultdict(lambda: {s.value: 0 for s in TaskState})
    for count in store.counts():
        by_role[count.role][count.state.value] += count.count
    totals = {s.value: sum(row[s.value] for row in by_role.values()) for s in TaskState}
    nodes = store.list_nodes()
    return {
        "by_role": dict(sorted(by_role.items())),
        "total": totals,
        "cooldowns": [cooldown.__dict__ for cooldown in store.active_cooldowns(now)],
        "cost": spend_by_role(queue, now),
        "nodes": node_rows(nodes, store.open_runs(), now),
        "unserved": unserved_roles(queue, by_role, nodes, now),
    }


def unserved_roles(queue: Queue, by_role: dict[str, dict[str, int]], nodes: list[Node],
                   now: float) -> list[dict[str, Any]]:
    """Roles with ready tasks that no live node can take (none defines the role, or none has
    the tags it requires): they wait until such a node comes up. Said only once some node
    has run on this database: before that, every task waits for the first `taskherd up`."""
    if not nodes:
        return []
    up = [node for node in nodes if node.status(now) == "up"]
    rows = []
    for role, states in by_role.items():
        ready = states[TaskState.READY.value]
        if not ready or any(node.runs(role) for node in up):
            continue
        config = queue.config.roles.get(role)
        needs = list(config.nodes) if config is not None else []
        rows.append({"role": role, "ready": ready, "needs_tags": needs,
                     "up": [node.name for node in up]})
    return rows


def spend_by_role(queue: Queue, now: float) -> list[dict[str, Any]]:
    """Per role: runs and cost over the last 7 days, and runs, cost and tokens since midnight
    in the fleet's zone (summed by the database)."""
    return queue.store.spend_by_role(now - WEEK, midnight(queue.config.daemon.timezone, now))


def node_rows(nodes: list[Node], open_runs: list[Run], now: float) -> list[dict[str, Any]]:
    """Each node with its status; the runs of a node that is not up are orphans: nobody
    watches them until their lease expires and a rescue puts their tasks back in the queue."""
    runs_by_node = Counter(run.node for run in open_runs)
    rows = []
    for node in nodes:
        status = node.status(now)
        rows.append(node.to_dict() | {
            "status": status,
            "open_runs": runs_by_node[node.name],
            "orphaned_runs": runs_by_node[node.name] if status != "up" else 0,
        })
    return rows


def midnight(timezone: str | None, moment: float) -> float:
    """Start of the day of `moment` in the fleet's zone (the machine's when none is stated)."""
    zone = ZoneInfo(timezone) if timezone else None
    local = datetime.fromtimestamp(moment, zone) if zone else datetime.fromtimestamp(moment)
    return local.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
