"""Why a ready task is not running: said once, here, and read by the daemon's log, `status`,
the board (`status` and the dashboard) and `task show`, so they never disagree.

Pure: the caller counts and passes the counts and `now` in. The dispatcher counts its own
node's runs and adds what the store's claims refused (which counted every node); the board
counts the open runs of the whole fleet from the store. The first reason that holds is the
one given, the role's own limits before the nodes': a role at its max_concurrent waits even
on a node with free slots.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from taskherd.model.settings import FLEET
from taskherd.model import Cooldown, Task, TaskState

if TYPE_CHECKING:
    from taskherd.model.settings import Config, RoleConfig


@dataclass(frozen=True)
class NodeRoom:
    """One node that is up, as far as starting a run on it goes."""

    name: str
    roles: frozenset[str]  # the roles it defines and has the tags for
    running: int
    max_concurrent: int
    paused: str | None = None  # why it starts nothing new (its disk), None when it does


@dataclass(frozen=True)
class Counts:
    """What the caller counted at `now`: open runs per role, the pools full, each role's last
    spawn, the runtimes paused (rate limit, endpoint down, probe) with why, the budget scopes
    paused (a role's name or FLEET) until when, reasons the caller already knows for a role
    (a claim the store refused, tags this node lacks), and the nodes up (None: not counted)."""

    running: Mapping[str, int] = field(default_factory=dict)
    full_pools: frozenset[str] = frozenset()
    last_spawn: Mapping[str, float] = field(default_factory=dict)
    paused_runtimes: Mapping[str, str] = field(default_factory=dict)
    over_budget: Mapping[str, float] = field(default_factory=dict)
    role_reasons: Mapping[str, str] = field(default_factory=dict)
    nodes: tuple[NodeRoom, ...] | None = None


# The phrases, also used by the claim's check (limits.refusal), which adds what it counted.
def rate_limited(runtime: str | None, until: float) -> str:
    return f"runtime {runtime} is rate-limited until {_moment(until)}"


def at_max_concurrent(role: str, limit: int, where: str = "") -> str:
    return f"role {role} is at max_concurrent {limit}{where}"


def staggered(role: str, stagger: float, where: str = "") -> str:
    return f"role {role} staggers spawns by {stagger:g}s{where}"


def pool_full(pool: str) -> str:
    return f"pool {pool} is full"


def role_wait(role: RoleConfig, counts: Counts, now: float) -> str | None:
    """Why no run of `role` may start now, by the role's own limits; None if they leave room."""
    for scope in (role.name, FLEET):
        if scope in counts.over_budget:
            who = f"role {scope}" if scope != FLEET else "the fleet"
            return f"{who} is over budget until {_moment(counts.over_budget[scope])}"
    if role.runtime in counts.paused_runtimes:
        return counts.paused_runtimes[role.runtime]
    running = counts.running.get(role.name, 0)
    if role.max_concurrent is not None and running >= role.max_concurrent:
        return at_max_concurrent(role.name, role.max_concurrent)
    last = counts.last_spawn.get(role.name)
    if role.stagger and last is not None and now - last < role.stagger:
        return staggered(role.name, role.stagger)
    if role.pool is not None and role.pool in counts.full_pools:
        return pool_full(role.pool)
    return counts.role_reasons.get(role.name)


def task_wait(task: Task, config: Config, counts: Counts, now: float) -> str | None:
    """Why `task` is not running now, or None when nothing holds it back (it starts at the
    next dispatch) or it is not waiting to run (running, settled, blocked)."""
    if task.state is TaskState.PENDING:
        return "it waits for approval (pending)"
    if task.state is not TaskState.READY:
        return None
    if task.run_after > now:
        return f"not before {_moment(task.run_after)} (in {task.run_after - now:.0f}s)"
    if task.role != "any":
        if task.role not in config.roles:
            return f"role {task.role} is not configured"
        why = role_wait(config.roles[task.role], counts, now)
        if why:
            return why
    if task.pool is not None and task.pool in counts.full_pools:
        return pool_full(task.pool)
    return None if counts.nodes is None else _node_wait(task.role, counts.nodes)


def cooldown_wait(cooldown: Cooldown, now: float) -> str:
    """Why nothing (more) of the cooldown's runtime may start now."""
    if cooldown.down_since is not None:
        return (f"runtime {cooldown.runtime}'s endpoint is down since "
                f"{_moment(cooldown.down_since)}: a probe request tests whether it is back")
    if cooldown.active(now):
        return rate_limited(cooldown.runtime, cooldown.until)
    probe = f" (run {cooldown.probe_run_id})" if cooldown.probe_run_id else ""
    return (f"runtime {cooldown.runtime} waits for the probe{probe} that tests whether "
            "its rate limit has lifted")


def _node_wait(role: str, nodes: tuple[NodeRoom, ...]) -> str | None:
    able = [node for node in nodes if role == "any" or role in node.roles]
    if not able:
        return f"no node that is up runs role {role}"
    starting = [node for node in able if node.paused is None]
    if not starting:
        return f"node {able[0].name} starts nothing new: {able[0].paused}"
    if all(node.running >= node.max_concurrent for node in starting):
        node = starting[0]
        return f"node {node.name} is at max_concurrent {node.max_concurrent}"
    return None


def _moment(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).astimezone().isoformat(sep=" ", timespec="seconds")
