"""Runs: which look stale, and what they cost."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from taskherd.liveness import node_down_reason, stale_reason
from taskherd.model import Run
from taskherd.ops import BadInput, Queue

ALL = 1 << 62  # every row: a limit no history reaches
COST_KEYS = ("role", "day")


def stale_runs(queue: Queue, now: float, idle_after: float | None = None
               ) -> list[tuple[Run, str]]:
    """Open runs that look stuck, each with why: its node down, its lease expired, never
    spawned, or silent longer than the role's idle_timeout (or `idle_after` seconds)."""
    if idle_after is not None and idle_after <= 0:
        raise BadInput(f"idle_after = {idle_after!r}: expected seconds > 0")
    store = queue.store
    nodes = {node.name: node for node in store.list_nodes()}
    found = []
    for run in store.open_runs():
        role = queue.config.role(run.role)
        why = node_down_reason(nodes.get(run.node), now) or stale_reason(
            run, store.get_task(run.task_id).lease_expires_at, spawn_timeout=role.spawn_timeout,
            idle_timeout=role.idle_timeout if idle_after is None else idle_after, now=now)
        if why:
            found.append((run, why))
    return found


def cost(queue: Queue, by: str, since: float | None) -> list[dict[str, Any]]:
    """Runs, cost and tokens summed per role or per day (days in the fleet's zone) for the
    runs started since `since` (all when None)."""
    if by not in COST_KEYS:
        raise BadInput(f"by = {by!r}: expected one of {', '.join(COST_KEYS)}")
    if by == "role" and since is not None:
        return [{"role": row["role"], "runs": row["runs_week"], "cost_usd": row["cost_week"],
                 "input_tokens": row["input_tokens_week"],
                 "output_tokens": row["output_tokens_week"]}
                for row in queue.store.spend_by_role(since, since)]
    zone = ZoneInfo(queue.config.daemon.timezone) if queue.config.daemon.timezone else None
    return sum_cost(queue.store.list_runs(since=since, limit=ALL), by, zone)


def sum_cost(runs: list[Run], by: str, zone: ZoneInfo | None) -> list[dict[str, Any]]:
    # By day stays a sum in Python for now: a day in the fleet's zone (daylight saving
    # included) is not something SQLite can group by.
    sums: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"runs": 0, "cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0})
    for run in runs:
        if by == "role":
            key = run.role
        else:
            moment = datetime.fromtimestamp(run.claimed_at, UTC)
            key = (moment.astimezone(zone) if zone else moment.astimezone()).strftime("%Y-%m-%d")
        row = sums[key]
        row["runs"] += 1
        row["cost_usd"] += run.cost_usd or 0.0
        row["input_tokens"] += run.input_tokens or 0
        row["output_tokens"] += run.output_tokens or 0
    return [{by: key, **sums[key]} for key in sorted(sums)]
