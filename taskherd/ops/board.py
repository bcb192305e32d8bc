"""The status board: tasks by state and role, cooldowns, nodes, and what each role spent."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from taskherd.model import Priority, Run, Task, TaskState
from taskherd.model.nodes import Node
from taskherd.ops import Queue
from taskherd.policy.costs import known_cost
from taskherd.policy.timefmt import zone_named
from taskherd.store import StoreError

# Why a task waits (policy/waits.py, and the claim's rules under it) is imported where one is
# asked: `status` asks only when a P0 task waits, and those rules' records cost its start ~5%.
if TYPE_CHECKING:
    from taskherd.ops.views import Board
    from taskherd.policy import waits

WEEK = 7 * 86400
# The board's lists show at most this many rows each, so a page costs the same at any size.
BOARD_ROWS = 50


def status_board(queue: Queue, now: float) -> dict[str, Any]:
    """Everything `taskherd status` shows, as data: counts by role and state (every state
    present, zero when none) with totals, active cooldowns, nodes, spend by role, and the P0
    tasks waiting with why."""
    store = queue.store
    by_role, totals = state_counts(queue)
    nodes = store.list_nodes()
    return {
        "by_role": by_role,
        "total": totals,
        "cooldowns": [cooldown.__dict__ for cooldown in store.active_cooldowns(now)],
        "endpoints_down": endpoints_down(queue, now),
        "cost": spend_by_role(queue, now),
        "nodes": node_rows(nodes, store.open_runs(), now),
        "unserved": unserved_roles(queue, by_role, nodes, now),
        "backup": backup_line(queue),
        "p0_waiting": [{"task_id": row["task"].id, "role": row["task"].role,
                        "state": row["task"].state.value, "waits_for": row["waits_for"]}
                       for row in p0_waits(queue, now)],
    }


def state_counts(queue: Queue) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Tasks by role and state (every state present, zero when none), and the totals."""
    by_role: dict[str, dict[str, int]] = defaultdict(lambda: {s.value: 0 for s in TaskState})
    for count in queue.store.counts():
        by_role[count.role][count.state.value] += count.count
    totals = {s.value: sum(row[s.value] for row in by_role.values()) for s in TaskState}
    return dict(sorted(by_role.items())), totals


def backup_line(queue: Queue) -> dict[str, Any]:
    """The backup service's last snapshot and failures, from the data dir (no network); none
    when the config names no target (a file left from before backups were turned off is not
    what the service does now)."""
    target = queue.config.backup.target
    if target is None:
        return {"target": None, "last_snapshot": None, "failures_in_a_row": 0,
                "last_failure": None}
    from taskherd.backups.state import read_state

    state = read_state(queue.config.daemon.data_dir)
    return {"target": target, "last_snapshot": state.last_snapshot,
            "failures_in_a_row": state.failures_in_a_row, "last_failure": state.last_failure}


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
    in the fleet's zone (summed by the database), with the runs of unknown cost of each
    period (`unpriced_today`, `unpriced_week`; a cost is None when only those ran)."""
    rows = queue.store.spend_by_role(now - WEEK, midnight(queue.config.daemon.timezone, now))
    return [row | {"cost_today": known_cost(row["cost_today"], row["unpriced_today"]),
                   "cost_week": known_cost(row["cost_week"], row["unpriced_week"])}
            for row in rows]


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


def paused_nodes(queue: Queue, now: float) -> list[dict[str, Any]]:
    """The live nodes that start nothing new (their disk is full or below its floor), since
    when and why: a node's own record, read from any process."""
    return [{"name": node.name, "since": node.paused_at, "reason": node.paused_reason}
            for node in queue.store.list_nodes()
            if node.paused_at is not None and node.status(now) == "up"]


def endpoints_down(queue: Queue, now: float) -> list[dict[str, Any]]:
    """Runtimes whose endpoint is down (a chat gateway away): since when, why, and when the
    next probe request may go (`probing`: it may now, or one is under way). Shown from the
    first failed call until a probe gets through, not only while the pause holds."""
    return [{"runtime": c.runtime, "since": c.down_since, "reason": c.reason,
             "next_probe": c.until, "probing": c.probing(now)}
            for c in queue.store.all_cooldowns() if c.down_since is not None]


def midnight(timezone: str | None, moment: float) -> float:
    """Start of the day of `moment` in the fleet's zone (the machine's when none is stated)."""
    zone = zone_named(timezone)  # zoneinfo is loaded only for a zone named
    local = datetime.fromtimestamp(moment, zone) if zone else datetime.fromtimestamp(moment)
    return local.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def running_agents(queue: Queue, now: float, limit: int = BOARD_ROWS
                   ) -> tuple[list[dict[str, Any]], int]:
    """The agents running now, the longest-running first, at most `limit` of them: their
    task, how long they have run, their last line; and how many run in all."""
    from taskherd.ops.logs import served_path
    from taskherd.ops.views import last_line

    runs = queue.store.open_runs()
    rows = []
    for run in runs[:limit]:
        try:
            task = queue.store.get_task(run.task_id)
        except StoreError:
            continue  # pruned between the two reads
        path = served_path(queue, run.log_path) if run.log_path else None
        rows.append({"run": run, "task": task,
                     "elapsed": now - (run.spawned_at or run.claimed_at),
                     "last_line": run.progress or (last_line(path) if path else "(starting)")})
    return rows, len(runs)


def live_board(queue: Queue, now: float) -> Board:
    """The board `taskherd status --watch` and the demo redraw: tasks by state (every state,
    zero when none) and the agents running now, each with its note or last line."""
    from taskherd.ops.views import Board, RunningAgent

    _, totals = state_counts(queue)
    rows, _ = running_agents(queue, now)
    agents = [RunningAgent(row["run"].id, row["run"].pid, row["run"].role, row["task"].id,
                           row["task"].title, row["last_line"]) for row in rows]
    return Board(totals, tuple(sorted(agents, key=lambda agent: agent.run_id)))


def p0_waits(queue: Queue, now: float, limit: int = BOARD_ROWS) -> list[dict[str, Any]]:
    """P0 tasks not yet running, each with why it waits (taskherd/policy/waits.py): the ready
    ones in claim order, then those pending approval, at most `limit` of each (both read
    through indexes)."""
    waiting = queue.store.waiting_at_priority(Priority.P0, limit=limit)
    return [{"task": task, "waits_for": why} for task, why in
            zip(waiting, _why_each_waits(queue, waiting, now), strict=True)]


def why_waiting(queue: Queue, task: Task, now: float) -> str | None:
    """Why `task` is not running now (None when it is not waiting to run)."""
    if task.state not in (TaskState.READY, TaskState.PENDING):
        return None
    return _why_each_waits(queue, [task], now)[0]


def _why_each_waits(queue: Queue, tasks: list[Task], now: float) -> list[str]:
    """Why each of `tasks` waits, from one reading of the fleet's counts."""
    if not tasks:
        return []
    from taskherd.policy import waits
    from taskherd.policy.limits import ClaimLimits

    counts, limits = wait_counts(queue, now), ClaimLimits.from_config(queue.config)
    return [waits.task_wait(task, limits, counts, now) or "its turn: nothing holds it back"
            for task in tasks]


def wait_counts(queue: Queue, now: float) -> waits.Counts:
    """The fleet's counts for why a task waits, from the store: every node's open runs by
    role and by node, the pools they fill, the paused runtimes and budgets, the nodes up.
    A node's own max_concurrent is not in the store: this config's is taken for every node."""
    from taskherd.policy import waits
    from taskherd.policy.budgets import COOLDOWN_PREFIX, Pause

    store, config = queue.store, queue.config
    open_runs = store.open_runs()
    running = Counter(run.role for run in open_runs)
    on_node = Counter(run.node for run in open_runs)
    pool_use: Counter[str] = Counter()
    for role, count in running.items():
        pool = config.roles[role].pool if role in config.roles else None
        if pool is not None:
            pool_use[pool] += count
    cooldowns = store.all_cooldowns()
    paused = {c.runtime: waits.cooldown_wait(c, now) for c in cooldowns
              if not c.runtime.startswith(COOLDOWN_PREFIX)}
    over = {scope: Pause(scope, c.until, c.reason) for c in cooldowns
            if c.runtime.startswith(COOLDOWN_PREFIX)
            for scope in [c.runtime.removeprefix(COOLDOWN_PREFIX)]}
    nodes = tuple(waits.NodeRoom(node.name, frozenset(node.roles), on_node[node.name],
                                 config.daemon.max_concurrent,
                                 node.paused_reason if node.paused_at is not None else None,
                                 tuple(node.tags))
                  for node in store.list_nodes() if node.status(now) == "up")
    return waits.Counts(running=dict(running), pools_running=dict(pool_use),
                        paused_runtimes=paused, over_budget=over, nodes=nodes)


