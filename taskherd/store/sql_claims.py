"""The claim: the first ready task a node may run, within the limits of the fleet, taken
with its run and inbox in one transaction; a part of `SQLStore`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from taskherd.model import ANY_ROLE, Claim, EventKind, Run, Task
from taskherd.policy import budgets
from taskherd.policy.limits import NODE, ClaimLimits, Refusal, Usage
from taskherd.store.connection import Connection
from taskherd.store.messages import InboxLimit
from taskherd.store.sql_parts import SQLParts
from taskherd.store.sql_parts import one_row as _one
from taskherd.store.sql_reports import budget_rows


class SQLClaims(SQLParts):
    def claim(
        self,
        node: str,
        now: float,
        lease_seconds: float,
        *,
        roles: Sequence[str] | None = None,
        full_pools: Sequence[str] | None = None,
        as_role: str | None = None,
        runtime: str | None = None,
        runtime_of: Mapping[str, str] | None = None,
        inbox: InboxLimit | None = None,
        limits: ClaimLimits | None = None,
        refusals: dict[str, Refusal] | None = None,
    ) -> Claim | None:
        if limits is not None:
            return self._claim_within(node, now, lease_seconds, limits, roles or [],
                                      full_pools or [], as_role, runtime, runtime_of or {},
                                      refusals if refusals is not None else {}, inbox)
        params = {
            "node": node,
            "now": now,
            "lease_until": now + lease_seconds,
            "roles": json.dumps(list(roles)) if roles is not None else None,
            "full_pools": json.dumps(list(full_pools)) if full_pools else None,
        }
        with self._write() as db:
            self._claim_started(db)
            row = _one(db.execute(self.q["claim_next"], params))
            if row is None:
                return None
            task = Task.from_row(row)
            role = as_role if task.role == ANY_ROLE and as_role else task.role
            runtime = runtime or (runtime_of or {}).get(role)
            run_params = {"task_id": task.id, "node": node, "role": role, "runtime": runtime,
                          "pool": None}
            run_row = _one(db.execute(self.q["insert_run"], run_params | {"now": now}))
            run = Run.from_row(run_row)
            # Delivered in the claim's transaction: a claim that rolls back delivers nothing,
            # and two runs never receive the same message.
            messages = self._deliver_inbox(db, run, inbox, now) if inbox else ()
            claim = Claim(task, run, messages)
            self._emit(EventKind.TASK_CHANGED, now, task_id=task.id, run_id=claim.run.id,
                       state=task.state, role=task.role)
        return claim

    def _claim_within(self, node: str, now: float, lease_seconds: float, limits: ClaimLimits,
                      roles: Sequence[str], full_pools: Sequence[str], as_role: str | None,
                      runtime: str | None, runtime_of: Mapping[str, str],
                      refusals: dict[str, Refusal], inbox: InboxLimit | None) -> Claim | None:
        """Claim the first ready task whose role and pools have room across every node,
        counted in the claim's transaction; a candidate that does not fit is passed by (its
        role, or its full task pool, noted in `refusals`) and the next one tried, each in a
        transaction of its own, so no lock outlives the candidate it was taken for."""
        allowed, full = list(roles), list(full_pools)
        while allowed:
            params = {"now": now, "roles": json.dumps(allowed),
                      "full_pools": json.dumps(full) if full else None}
            any_role = as_role if as_role in allowed else allowed[0]
            with self._write() as db:
                self._claim_started(db)
                candidate = _one(db.execute(self.q["claim_candidate"], params))
                if candidate is None:
                    return None
                role = any_role if candidate["role"] == ANY_ROLE else candidate["role"]
                claimed = self._claim_if_room(db, candidate, node, now, lease_seconds, limits,
                                              role, runtime or runtime_of.get(role), inbox)
                if isinstance(claimed, Claim):
                    return claimed
            pass_by(claimed, refusals, allowed, full)
        return None

    def _claim_if_room(self, db: Connection, candidate: Mapping[str, Any], node: str,
                       now: float, lease_seconds: float, limits: ClaimLimits, role: str,
                       runtime: str | None, inbox: InboxLimit | None) -> Claim | Refusal:
        """The candidate claimed as a run of `role` if its limits leave room, else why not:
        counted, then claimed, one step at a time (PostgreSQL does it in one statement)."""
        refusal = self._limits_refusal(db, node, now, limits, role, candidate["pool"])
        if refusal is not None:
            return refusal
        return self._claim_candidate(db, candidate["id"], node, now, lease_seconds, role,
                                     runtime, limits, inbox)

    def _limits_refusal(self, db: Connection, node: str, now: float, limits: ClaimLimits,
                        role: str, task_pool: str | None) -> Refusal | None:
        params = usage_params(node, now, limits, role, task_pool)
        # The lock and the count go together: every claim that counts across nodes holds
        # the lock for as long as its transaction, so each round trip inside it is one that
        # every other node's claim waits for. The count's snapshot is still taken after the
        # lock is granted (the statements run one after the other).
        with self._together(db):
            if limits.crosses_nodes(role, task_pool):
                self._order_claims(db)
            counted = db.execute(self.q["limit_usage"], params)
        usage = usage_of(_one(counted), params)
        refusal = limits.refusal(role, task_pool, usage, now)
        if refusal is None and limits.budget_scopes(role):
            return self._budget_refusal(db, limits, role, now)
        return refusal

    def _budget_refusal(self, db: Connection, limits: ClaimLimits, role: str,
                        now: float) -> Refusal | None:
        """Whether a budgeted role's next run still fits its budgets, from the spend read
        after the claims were ordered: every run claimed before this one, on any node, counts
        (its cost, or its expected cost while it is open), so no node starts a run once the
        spend committed reaches the limit."""
        span = limits.budget_periods(now)
        only = None if budgets.FLEET in limits.budget_scopes(role) else role
        params = {"month_start": span.month_start, "day_start": span.day_start, "role": only}
        rows = budget_rows(db.execute(self.q["budget_spend"], params).fetchall())
        return limits.budget_refusal(role, rows, span)

    def _claim_candidate(self, db: Connection, task_id: int, node: str, now: float,
                         lease_seconds: float, role: str, runtime: str | None,
                         limits: ClaimLimits, inbox: InboxLimit | None) -> Claim:
        claimed = {"id": task_id, "node": node, "now": now, "lease_until": now + lease_seconds}
        limit = limits.role(role)
        run_params = {"task_id": task_id, "node": node, "role": role, "runtime": runtime,
                      "pool": limit.pool, "now": now}
        # Together, in one round trip under the claims' lock: the candidate's row is locked
        # (SKIP LOCKED, or SQLite's write lock), so claim_task always claims it.
        with self._together(db):
            task_claimed = db.execute(self.q["claim_task"], claimed)
            run_inserted = db.execute(self.q["insert_run"], run_params)
            if limit.stagger:
                db.execute(self.q["note_role_claim"], {"role": role, "node": node, "now": now})
        return self._claimed(db, Task.from_row(_one(task_claimed)),
                             Run.from_row(_one(run_inserted)), now, inbox)

    def _claimed(self, db: Connection, task: Task, run: Run, now: float,
                 inbox: InboxLimit | None) -> Claim:
        """The claim of `task` by `run` within limits, its inbox delivered in the claim's
        transaction as in `claim`."""
        messages = self._deliver_inbox(db, run, inbox, now) if inbox else ()
        self._emit(EventKind.TASK_CHANGED, now, task_id=task.id, run_id=run.id,
                   state=task.state, role=task.role)
        return Claim(task, run, messages)


def usage_params(node: str, now: float, limits: ClaimLimits, role: str,
                  task_pool: str | None) -> dict[str, Any]:
    """limit_usage's parameters for a run of `role` in `task_pool` on `node`."""
    limit = limits.role(role)
    pools = limits.pools_of(role, task_pool)
    pool_a, pool_b = (pools + (None, None))[:2]

    def node_filter(scope: str | None) -> str | None:
        return node if scope == NODE else None

    return {
        "now": now, "role": role, "role_node": node_filter(limit.scope),
        "pool_a": pool_a, "pool_a_node": node_filter(pool_a and limits.pools[pool_a].scope),
        "pool_b": pool_b, "pool_b_node": node_filter(pool_b and limits.pools[pool_b].scope),
        "runtime": limit.runtime,
    }


def usage_of(row: Mapping[str, Any], params: Mapping[str, Any]) -> Usage:
    """The Usage a row of limit_usage's columns read, for the pools `params` named."""
    running = {pool: row[column] for pool, column in
               ((params["pool_a"], "pool_a_running"), (params["pool_b"], "pool_b_running"))
               if pool}
    return Usage(row["role_running"], row["role_last_claim"], running, row["cooldown_until"])


def pass_by(refusal: Refusal, refusals: dict[str, Refusal], allowed: list[str],
            full: list[str]) -> None:
    """Note why a candidate was refused, and leave its kind out of the next candidates: the
    tasks of its full task pool, or else its role's."""
    refusals[refusal.role] = refusal
    if refusal.pool is not None:
        full.append(refusal.pool)
    else:
        allowed.remove(refusal.role)
