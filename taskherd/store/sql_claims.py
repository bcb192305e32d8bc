"""The claim: the first ready task a node may run now, taken with its run and inbox in one
transaction; a part of `SQLStore`.

Two ways, by what the request asks: without limits, one statement takes the first ready
task (`claim_next`); within limits, the first ready candidate is counted against them and
claimed only if policy/admission.py's rule leaves it room, else passed by and the next one
tried, each candidate in a transaction of its own (`_try_candidate`: the steps here, one
statement in PostgresStore's).

And the claim a run's end makes room for (`finish_run_and_claim`): the end and the node's
next claim in one transaction, every candidate within limits tried in it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from taskherd.model import ANY_ROLE, Claim, EventKind, Finished, Run, RunResult, Task
from taskherd.model.settings import FLEET, NODE, RetryPolicy
from taskherd.store.base import StoreError, warn_claim_not_made
from taskherd.store.connection import Connection
from taskherd.store.sql_credentials import run_token, token_digest
from taskherd.store.sql_parts import SQLParts
from taskherd.store.sql_parts import one_row as _one
from taskherd.store.sql_reports import budget_rows

# policy/admission is imported where a claim is made or counted: every command opens this
# store, only a daemon claims, and the records of the claim's rules cost a command's start ~5%.
if TYPE_CHECKING:
    from taskherd.policy.admission import ClaimAttempt, ClaimRequest, Refusal, Usage
    from taskherd.policy.budgets import Pause
    from taskherd.policy.limits import ClaimLimits


class SQLClaims(SQLParts):
    def claim(self, request: ClaimRequest) -> Claim | None:
        return self.attempt_claim(request).claim

    def attempt_claim(self, request: ClaimRequest) -> ClaimAttempt:
        from taskherd.policy.admission import ClaimAttempt

        if request.limits is None:
            return ClaimAttempt(self._claim_next(request))
        return self._claim_within(request, request.limits)

    def finish_run_and_claim(self, run_id: int, result: RunResult, policy: RetryPolicy,
                             now: float, request: ClaimRequest) -> tuple[Finished, ClaimAttempt]:
        """As Store's, in one transaction: the run's end, then the claim in a savepoint of it
        (one commit, and the pages both halves write are written once). A claim that fails
        is rolled back to the savepoint alone and the end commits all the same: one the
        store cannot make (a StoreError) is answered as none, anything else raised once the
        end is committed, as Store's does. Committed durably, as a run's end is: the claim's
        own transaction does not wait for the disk (`_claim_started`), this one must."""
        with self._write() as db:
            finished = self._finish(db, run_id, result, policy, now)
            attempt, failure = self._claim_after_end(db, run_id, request)
        if failure is not None:
            raise failure
        return finished, attempt

    def _claim_after_end(self, db: Connection, run_id: int,
                         request: ClaimRequest) -> tuple[ClaimAttempt, Exception | None]:
        """The claim in a savepoint of the end's transaction, or none and why not."""
        from taskherd.policy.admission import ClaimAttempt

        assert self._outbox is not None
        outbox, told = self._outbox, len(self._outbox)
        try:
            with self._savepoint(db):
                return self._attempt_claim_in(db, request), None
        except Exception as error:
            if self._transaction_lost(db):
                raise  # the end went with it: the transaction's end says why
            del outbox[told:]  # the claim's event: nothing of it is committed
            if not isinstance(error, StoreError):
                return ClaimAttempt(None), error
            warn_claim_not_made(run_id, error)
            return ClaimAttempt(None), None

    def _attempt_claim_in(self, db: Connection, request: ClaimRequest) -> ClaimAttempt:
        """`attempt_claim`'s claim inside the caller's transaction on `db`; within limits,
        every candidate is tried in it (SQLite's holds the write lock already; PostgreSQL's
        holds the claims' lock, once a candidate took it, to its end)."""
        from taskherd.policy.admission import ClaimAttempt

        limits = request.limits
        if limits is None:
            return ClaimAttempt(self._claim_next_in(db, request))
        return claim_within(request, lambda allowed, full: self._try_candidate_in(
            db, request, limits, allowed, full))

    def _claim_next(self, request: ClaimRequest) -> Claim | None:
        """The first ready task of the request's roles, in one statement: no limit to count."""
        with self._write() as db:
            self._claim_started(db)
            return self._claim_next_in(db, request)

    def _claim_next_in(self, db: Connection, request: ClaimRequest) -> Claim | None:
        now = request.now
        params = {
            "node": request.node,
            "now": now,
            "lease_until": now + request.lease_seconds,
            "roles": json.dumps(list(request.roles)) if request.roles is not None else None,
            "full_pools": json.dumps(list(request.full_pools)) if request.full_pools else None,
        }
        row = _one(db.execute(self.q["claim_next"], params))
        if row is None:
            return None
        task = Task.from_row(row)
        role = request.as_role if task.role == ANY_ROLE and request.as_role else task.role
        run_params = {"task_id": task.id, "node": request.node, "role": role,
                      "runtime": request.runtime_for(role), "pool": None, "now": now,
                      "credential_sha256": credential_digest(request)}
        run = Run.from_row(_one(db.execute(self.q["insert_run"], run_params)))
        return self._claimed(db, task, run, now, request)

    def _claim_within(self, request: ClaimRequest, limits: ClaimLimits) -> ClaimAttempt:
        """Claim the first ready task whose role and pools have room across every node; a
        candidate that does not fit is passed by (its role, or its full task pool: `pass_by`)
        and the next one tried, each in a transaction of its own, so no lock outlives the
        candidate it was taken for. The refusals met on the way come back with the claim."""
        return claim_within(request, lambda allowed, full: self._try_candidate(
            request, limits, allowed, full))

    def _try_candidate(self, request: ClaimRequest, limits: ClaimLimits, allowed: list[str],
                   full: list[str]) -> Claim | Refusal | None:
        """The first ready task of the `allowed` roles outside the `full` pools, claimed as a
        run if its limits leave room, else why not; None when no task is ready. Counted,
        then claimed, one step at a time (PostgresStore does it in one statement)."""
        with self._write() as db:
            self._claim_started(db)
            return self._try_candidate_in(db, request, limits, allowed, full)

    def _try_candidate_in(self, db: Connection, request: ClaimRequest, limits: ClaimLimits,
                          allowed: list[str], full: list[str]) -> Claim | Refusal | None:
        params = {"now": request.now, "roles": json.dumps(allowed),
                  "full_pools": json.dumps(full) if full else None}
        candidate = _one(db.execute(self.q["claim_candidate"], params))
        if candidate is None:
            return None
        role = (request.any_role(allowed) if candidate["role"] == ANY_ROLE
                else candidate["role"])
        refusal = self._limits_refusal(db, request, limits, role, candidate["pool"])
        if refusal is not None:
            return refusal
        return self._claim_candidate(db, request, limits, candidate["id"], role)

    def _limits_refusal(self, db: Connection, request: ClaimRequest, limits: ClaimLimits,
                        role: str, task_pool: str | None) -> Refusal | None:
        from taskherd.policy import admission

        now = request.now
        params = usage_params(request.node, now, limits, role, task_pool)
        # The lock and the count go together: every claim that counts across nodes holds
        # the lock for as long as its transaction, so each round trip inside it is one that
        # every other node's claim waits for. The count's snapshot is still taken after the
        # lock is granted (the statements run one after the other).
        with self._together(db):
            if limits.crosses_nodes(role, task_pool):
                self._order_claims(db)
            counted = db.execute(self.q["limit_usage"], params)
        usage = usage_of(_one(counted), params)
        refusal = admission.refusal(limits, role, task_pool, usage, now)
        if refusal is None and limits.budget_scopes(role):
            # The spend is read only when the counts leave room: it is the dearer read.
            paused = self._budget_pauses(db, limits, role, now)
            refusal = admission.refusal(limits, role, task_pool,
                                        dataclasses.replace(usage, budget_paused=paused), now)
        return refusal

    def _budget_pauses(self, db: Connection, limits: ClaimLimits, role: str,
                       now: float) -> dict[str, Pause]:
        """The budgets of a budgeted role with no room for its next run, from the spend read
        after the claims were ordered: every run claimed before this one, on any node, counts
        (its cost, or its expected cost while it is open), so no node starts a run once the
        spend committed reaches the limit."""
        span = limits.budget_periods(now)
        only = None if FLEET in limits.budget_scopes(role) else role
        params = {"month_start": span.month_start, "day_start": span.day_start, "role": only}
        rows = budget_rows(db.execute(self.q["budget_spend"], params).fetchall())
        return limits.budget_pauses(role, rows, span)

    def _claim_candidate(self, db: Connection, request: ClaimRequest, limits: ClaimLimits,
                         task_id: int, role: str) -> Claim:
        node, now = request.node, request.now
        claimed = {"id": task_id, "node": node, "now": now,
                   "lease_until": now + request.lease_seconds}
        limit = limits.role(role)
        run_params = {"task_id": task_id, "node": node, "role": role,
                      "runtime": request.runtime_for(role), "pool": limit.pool, "now": now,
                      "credential_sha256": credential_digest(request)}
        # Together, in one round trip under the claims' lock: the candidate's row is locked
        # (SKIP LOCKED, or SQLite's write lock), so claim_task always claims it.
        with self._together(db):
            task_claimed = db.execute(self.q["claim_task"], claimed)
            run_inserted = db.execute(self.q["insert_run"], run_params)
            if limit.stagger:
                db.execute(self.q["note_role_claim"], {"role": role, "node": node, "now": now})
        return self._claimed(db, Task.from_row(_one(task_claimed)),
                             Run.from_row(_one(run_inserted)), now, request)

    def _claimed(self, db: Connection, task: Task, run: Run, now: float,
                 request: ClaimRequest) -> Claim:
        """The claim of `task` by `run`, its inbox delivered in the claim's transaction: a
        claim that rolls back delivers nothing, and two runs never receive the same message.
        The run's credential too, when the request brings its secret: its digest was
        written with the run's row (insert_run), and the token names the run."""
        inbox, secret = request.inbox, request.credential
        messages = self._deliver_inbox(db, run, inbox, now) if inbox else ()
        credential = run_token(run.id, secret) if secret is not None else None
        self._emit(EventKind.TASK_CHANGED, now, task_id=task.id, run_id=run.id,
                   state=task.state, role=task.role)
        return Claim(task, run, messages, credential)


def credential_digest(request: ClaimRequest) -> str | None:
    """What insert_run keeps of the credential the request brings: its secret's digest."""
    return token_digest(request.credential) if request.credential is not None else None


def claim_within(request: ClaimRequest,
                 try_candidate: Callable[[list[str], list[str]], Claim | Refusal | None]
                 ) -> ClaimAttempt:
    """The first candidate `try_candidate` claims for the request's roles, those refused on
    the way passed by, with the refusals met."""
    from taskherd.policy.admission import ClaimAttempt

    allowed, full = list(request.roles or ()), list(request.full_pools)
    refused: list[Refusal] = []
    while allowed:
        claimed = try_candidate(allowed, full)
        if claimed is None:
            break
        if isinstance(claimed, Claim):
            return ClaimAttempt(claimed, tuple(refused))
        refused.append(claimed)
        pass_by(claimed, allowed, full)
    return ClaimAttempt(None, tuple(refused))


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
    from taskherd.policy.admission import Usage

    running = {pool: row[column] for pool, column in
               ((params["pool_a"], "pool_a_running"), (params["pool_b"], "pool_b_running"))
               if pool}
    return Usage(role_running=row["role_running"], role_last_claim=row["role_last_claim"],
                 pools_running=running, cooldown_until=row["cooldown_until"])


def pass_by(refusal: Refusal, allowed: list[str], full: list[str]) -> None:
    """Leave the kind of a refused candidate out of the next candidates: the tasks of its
    full task pool, or else its role's."""
    if refusal.pool is not None:
        full.append(refusal.pool)
    else:
        allowed.remove(refusal.role)
