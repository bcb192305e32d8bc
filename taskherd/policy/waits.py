"""Why a ready task is not running: said once, here, and read by the daemon's log, `status`,
the board (`status` and the dashboard) and `task show`, so they never disagree.

Pure: the caller counts and passes the counts and `now` in. The dispatcher counts its own
node's runs and adds what the store's claims refused (which counted every node); the board
counts the open runs of the whole fleet from the store. Whether a role's run may start is
policy/admission.py's rule, the one the claim itself applies; this module adds what lies
around it: a task pending or not yet due, a role not configured, and which of the nodes up
could take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

from taskherd.model import ANY_ROLE, Cooldown, Task, TaskState
from taskherd.model.nodes import runs_role
from taskherd.model.record import Record
from taskherd.policy import admission
from taskherd.policy.admission import NodeRoom, moment, rate_limited
from taskherd.policy.budgets import Pause
from taskherd.policy.limits import ClaimLimits

__all__ = ["Counts", "NodeRoom", "cooldown_wait", "role_wait", "task_wait"]


class Counts(Record):
    """What the caller counted at `now`: open runs per role and per pool, the pools a count
    made elsewhere found full (a claim's), each role's last spawn, the runtimes paused (rate
    limit, endpoint down, probe) with why, the budget scopes paused (a role's name or FLEET),
    reasons the caller already knows for a role (a claim the store refused), and the nodes up
    (None: not counted)."""

    running: Mapping[str, int] = field(default_factory=dict)
    pools_running: Mapping[str, int] = field(default_factory=dict)
    full_pools: frozenset[str] = frozenset()
    last_spawn: Mapping[str, float] = field(default_factory=dict)
    paused_runtimes: Mapping[str, str] = field(default_factory=dict)
    over_budget: Mapping[str, Pause] = field(default_factory=dict)
    role_reasons: Mapping[str, str] = field(default_factory=dict)
    nodes: tuple[NodeRoom, ...] | None = None


def role_wait(limits: ClaimLimits, role: str, counts: Counts, now: float,
              task_pool: str | None = None, node: NodeRoom | None = None) -> str | None:
    """Why no run of `role` (for a task in `task_pool`, on `node` if one is named) may start
    now, by the counts; None if they leave room."""
    runtime = limits.role(role).runtime
    usage = admission.Usage(
        role_running=counts.running.get(role, 0), role_last_claim=counts.last_spawn.get(role),
        pools_running=counts.pools_running, pools_full=counts.full_pools,
        runtime_paused=counts.paused_runtimes.get(runtime) if runtime else None,
        budget_paused=counts.over_budget, node=node)
    refused = admission.refusal(limits, role, task_pool, usage, now)
    return refused.reason if refused is not None else counts.role_reasons.get(role)


def task_wait(task: Task, limits: ClaimLimits, counts: Counts, now: float) -> str | None:
    """Why `task` is not running now, or None when nothing holds it back (it starts at the
    next dispatch) or it is not waiting to run (running, settled, blocked)."""
    if task.state is TaskState.PENDING:
        return "it waits for approval (pending)"
    if task.state is not TaskState.READY:
        return None
    if task.run_after > now:
        return f"not before {moment(task.run_after)} (in {task.run_after - now:.0f}s)"
    if task.role != ANY_ROLE and task.role not in limits.roles:
        return f"role {task.role} is not configured"
    why = role_wait(limits, task.role, counts, now, task.pool)
    if why:
        return why
    return None if counts.nodes is None else _node_wait(limits, task.role, counts.nodes)


def cooldown_wait(cooldown: Cooldown, now: float) -> str:
    """Why nothing (more) of the cooldown's runtime may start now."""
    if cooldown.down_since is not None:
        return (f"runtime {cooldown.runtime}'s endpoint is down since "
                f"{moment(cooldown.down_since)}: a probe request tests whether it is back")
    if cooldown.active(now):
        return rate_limited(cooldown.runtime, cooldown.until)
    probe = f" (run {cooldown.probe_run_id})" if cooldown.probe_run_id else ""
    return (f"runtime {cooldown.runtime} waits for the probe{probe} that tests whether "
            "its rate limit has lifted")


def _node_wait(limits: ClaimLimits, role: str, nodes: tuple[NodeRoom, ...]) -> str | None:
    """None when some node up may start a run of `role` now, else why none may: the node
    alone if there is one, else that no node runs the role, or the first that would but is
    full, or else paused."""
    whys = [(node, admission.node_refusal(limits, role, node)) for node in nodes]
    if any(why is None for _, why in whys):
        return None
    if len(whys) == 1:
        return whys[0][1]
    able = [(node, why) for node, why in whys if runs_role(node.roles, role)]
    if not able:
        return f"no node that is up runs role {role}"
    starting = [why for node, why in able if node.paused is None]
    return (starting or [why for _, why in able])[0]
