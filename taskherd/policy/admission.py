"""May a run of this role, for a task in this pool, start now, and if not, why: each rule
once, here.

The rules, in the order their reasons are given: the budgets of the role and of the fleet,
the role's runtime (rate-limited, its endpoint down, waiting for its probe), the role's own
max_concurrent and stagger, its pools and the task's, then the node (the role's tags, its
disk, its max_concurrent). A role's own limits come before the node's: a role at its
max_concurrent waits even on a node with free slots.

Pure: the caller counts and passes the counts and `now` in, as a `Usage`. Each caller
counts what it can see, and the same rule judges it:
- the store's claim (store/sql_claims.py, and PostgreSQL's one-statement claim, whose verdict
  the database makes with the same tests and this module words), counting every node's runs
  in the claim's transaction, under the lock that orders claims;
- the dispatcher (services/dispatcher.py), counting its own node's runs and adding what the
  store's claims refused on the last pass, before it asks the store for a claim;
- why a task waits (policy/waits.py), which the board, `task show` and the daemon's log say,
  counting the open runs of the whole fleet (or of the dispatcher's node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from datetime import datetime

from taskherd.model import Claim, InboxLimit
from taskherd.model.nodes import runs_role
from taskherd.model.record import Record
from taskherd.model.settings import FLEET
from taskherd.policy import budgets
from taskherd.policy.limits import NODE, ClaimLimits


class Refusal(Record):
    """Why a candidate may not start now; `pool` names a task pool that is full (its other
    tasks wait too), `retry_at` when a stagger lets the role start again."""

    role: str
    reason: str
    pool: str | None = None
    retry_at: float | None = None
    budget: budgets.Pause | None = None  # the budget pause that refused it, if one did


class NodeRoom(Record):
    """One node that is up, as far as starting a run on it goes."""

    name: str
    roles: frozenset[str]  # the roles it defines and has the tags for
    running: int
    max_concurrent: int
    paused: str | None = None  # why it starts nothing new (its disk), None when it does
    tags: tuple[str, ...] | None = None  # its tags, when known (to say which one a role lacks)


class Usage(Record):
    """What the caller counted at `now` about a run of one role: its open runs (on the node
    alone when its scope is node), its last claim, the open runs of each pool and the pools
    a count made elsewhere found full, its runtime's pause, the budgets paused by scope (the
    role's name or FLEET), and the node it would run on (None: not judged here)."""

    role_running: int = 0
    role_last_claim: float | None = None
    pools_running: Mapping[str, int] = field(default_factory=dict)
    pools_full: frozenset[str] = frozenset()
    # The runtime's rate limit as a claim reads it (until when), or why the runtime starts
    # nothing as its cooldown record says (the dispatcher and the board read the record: an
    # endpoint down, a probe still to come).
    cooldown_until: float | None = None
    runtime_paused: str | None = None
    budget_paused: Mapping[str, budgets.Pause] = field(default_factory=dict)
    node: NodeRoom | None = None


class ClaimRequest(Record):
    """What a node asks the store for: the first ready task it may run now, with a run of
    `node` leased for `lease_seconds`.

    `roles` limits it to tasks of those roles (plus tasks for role `any`, run as `as_role`
    or the first of `roles`); None claims any role. Tasks in `full_pools` are passed by.
    With `limits`, the task must also fit its role's and pools' limits and its budgets,
    counted across every node in the claim's transaction (`refusal`); a task that does not
    fit is passed by and the next one tried. The run's runtime is `runtime`, else
    `runtime_of[role]`. With `inbox`, the run's messages are delivered in the claim's
    transaction. With `credential` (a secret minted before the claim), the run's credential
    is recorded in the claim's transaction too: the token names the run (`<run_id>.<secret>`),
    its digest only is kept on the run's row, and the token is handed back on the claim: no
    write of its own between the claim and the agent's start."""

    node: str
    now: float
    lease_seconds: float
    roles: Sequence[str] | None = None
    full_pools: Sequence[str] = ()
    as_role: str | None = None
    runtime: str | None = None
    runtime_of: Mapping[str, str] = field(default_factory=dict)
    inbox: InboxLimit | None = None
    limits: ClaimLimits | None = None
    credential: str | None = None

    def runtime_for(self, role: str) -> str | None:
        return self.runtime or self.runtime_of.get(role)

    def any_role(self, allowed: Sequence[str]) -> str:
        """The role a task for role `any` runs as, among the roles still `allowed`."""
        if self.as_role is not None and self.as_role in allowed:
            return self.as_role
        return allowed[0]


class ClaimAttempt(Record):
    """What a claim came back with: the claim, if it made one, and why each candidate it
    passed by on the way could not start (a role full on other nodes, a pool, a budget)."""

    claim: Claim | None
    refused: tuple[Refusal, ...] = ()


# -- the rule -----------------------------------------------------------------------------

def refusal(limits: ClaimLimits, role: str, task_pool: str | None, usage: Usage,
            now: float) -> Refusal | None:
    """None when a run of `role` for a task in `task_pool` may start now, given `usage`,
    else why not (the first reason that holds)."""
    return (_budget_refusal(role, usage) or _runtime_refusal(limits, role, usage, now)
            or _role_refusal(limits, role, usage, now)
            or _pool_refusal(limits, role, task_pool, usage)
            or _node_refusal(limits, role, usage.node))


def node_refusal(limits: ClaimLimits, role: str, node: NodeRoom) -> str | None:
    """Why `node` may not start a run of `role` now, by the node alone; None if it may."""
    refused = _node_refusal(limits, role, node)
    return refused.reason if refused else None


def full_pools(limits: ClaimLimits, pools_running: Mapping[str, int]) -> frozenset[str]:
    """The limited pools whose open runs (`pools_running`) leave no place."""
    return frozenset(pool for pool, running in pools_running.items()
                     if pool in limits.pools and _no_place(limits, pool, running))


def _no_place(limits: ClaimLimits, pool: str, running: int) -> bool:
    return running >= limits.pools[pool].capacity


def _budget_refusal(role: str, usage: Usage) -> Refusal | None:
    for scope in (role, FLEET):
        pause = usage.budget_paused.get(scope)
        if pause is not None:
            return Refusal(role, over_budget(pause), retry_at=pause.until, budget=pause)
    return None


def _runtime_refusal(limits: ClaimLimits, role: str, usage: Usage,
                     now: float) -> Refusal | None:
    if usage.runtime_paused is not None:
        return Refusal(role, usage.runtime_paused)
    if usage.cooldown_until is not None and usage.cooldown_until > now:
        return Refusal(role, rate_limited(limits.role(role).runtime, usage.cooldown_until))
    return None


def _role_refusal(limits: ClaimLimits, role: str, usage: Usage, now: float) -> Refusal | None:
    limit = limits.role(role)
    where = " on this node" if limit.scope == NODE else ""
    if limit.max_concurrent is not None and usage.role_running >= limit.max_concurrent:
        return Refusal(role, at_max_concurrent(role, limit.max_concurrent, where)
                       + f" ({usage.role_running} running)")
    if limit.stagger and usage.role_last_claim is not None:
        ready_at = usage.role_last_claim + limit.stagger
        if now < ready_at:
            return Refusal(role, staggered(role, limit.stagger, where), retry_at=ready_at)
    return None


def _pool_refusal(limits: ClaimLimits, role: str, task_pool: str | None,
                  usage: Usage) -> Refusal | None:
    for pool in limits.pools_of(role, task_pool):
        capacity = limits.pools[pool].capacity
        if pool in usage.pools_full or _no_place(limits, pool, usage.pools_running.get(pool, 0)):
            scope = " on this node" if limits.pools[pool].scope == NODE else ""
            # The task's own pool, when the role's is another: the role's other tasks may go.
            full_task_pool = pool if pool == task_pool and pool != limits.role(role).pool else None
            return Refusal(role, f"{pool_full(pool)} ({capacity}{scope})", pool=full_task_pool)
    return None


def _node_refusal(limits: ClaimLimits, role: str, node: NodeRoom | None) -> Refusal | None:
    if node is None:
        return None
    if not runs_role(node.roles, role):
        needs = limits.role(role).tags
        if node.tags is not None and not set(needs) <= set(node.tags):
            return Refusal(role, f"role {role} runs on nodes tagged {', '.join(needs)}; node "
                                 f"{node.name} has {', '.join(node.tags) or 'no tags'}")
        return Refusal(role, f"node {node.name} does not run role {role}")
    if node.paused is not None:
        return Refusal(role, f"node {node.name} starts nothing new: {node.paused}")
    if node.running >= node.max_concurrent:
        return Refusal(role, f"node {node.name} is at max_concurrent {node.max_concurrent}")
    return None


# -- the words (waits.py says the rest of why a task waits with them) ---------------------

def rate_limited(runtime: str | None, until: float) -> str:
    return f"runtime {runtime} is rate-limited until {moment(until)}"


def at_max_concurrent(role: str, limit: int, where: str = "") -> str:
    return f"role {role} is at max_concurrent {limit}{where}"


def staggered(role: str, stagger: float, where: str = "") -> str:
    return f"role {role} staggers spawns by {stagger:g}s{where}"


def pool_full(pool: str) -> str:
    return f"pool {pool} is full"


def over_budget(pause: budgets.Pause) -> str:
    who = f"role {pause.scope}" if pause.scope != FLEET else "the fleet"
    return f"{who} is over budget until {moment(pause.until)} ({pause.reason})"


def moment(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).astimezone().isoformat(sep=" ", timespec="seconds")
