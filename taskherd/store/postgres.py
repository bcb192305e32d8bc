"""The PostgreSQL store: psycopg 3, one connection, `FOR UPDATE SKIP LOCKED` claims.

Several daemons (nodes) on several machines share one database: a claim skips the rows
another node is claiming instead of waiting for them, and every other transition is guarded
by the state it expects, as in SQLite. What differs from SQLite is here and in the
reasons written above the blocks of `store/sql/postgres/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from taskherd import __version__
from taskherd.model import (
    TASK_ADDRESS,
    Claim,
    Event,
    EventKind,
    Finished,
    Message,
    NewTask,
    Outcome,
    Run,
    RunResult,
    Task,
    TaskState,
)
from taskherd.model.settings import RetryPolicy
from taskherd.policy import admission
from taskherd.policy.admission import ClaimAttempt, ClaimRequest, Refusal
from taskherd.policy.chains import REVIEW_OF, Workflow
from taskherd.policy.limits import NODE, ClaimLimits
from taskherd.policy.queue import Settlement, plain_settlement
from taskherd.store.base import Enqueued, StoreError, StoreUnavailable
from taskherd.store.errors import SpawnAllowance, StoreDiskFull
from taskherd.store.events import Listener
from taskherd.store.requests import RequestKey
from taskherd.store.sql_claims import pass_by, usage_of, usage_params
from taskherd.store.sql_credentials import token_digest
from taskherd.store.sql_store import Emitted, SQLStore, built
from taskherd.store.sql_tasks import task_params
from taskherd.store.sqlfile import (
    function_definition,
    latest_migration,
    machinery,
    newer_schema_error,
    pending,
    queries,
)

DURABILITY = ("full", "normal")  # machinery blocks durability_full, durability_normal
# What claim_if_room returns before the claimed run's columns: the counts and the events sent.
USAGE_COLUMNS = ("role_running", "role_last_claim", "pool_a_running", "pool_b_running",
                 "cooldown_until", "notified")
RELISTEN_DELAY = 5.0  # seconds between attempts to get a lost LISTEN connection back
# The meta keys whose task's settle sets off more than the settle (its reviewed task's
# verdict, the outbox of its delivery targets): finish_run_procedure leaves it to the steps.
# JSON, as the roles beside them: psycopg adapts a list to an array element by element.
SETTLE_META = json.dumps([REVIEW_OF, "deliver_to"])
M = machinery("postgres")
# The functions and procedures each connection creates in its temporary schema (machinery
# blocks): a claim within limits, a run's end, the two together, and an enqueue, each one
# round trip.
SERVER_CALLS = ("claim_within_function", "finish_run_procedure", "finish_and_claim_procedure",
                "enqueue_procedure")


log = logging.getLogger(__name__)


class PostgresStore(SQLStore):
    q = queries("postgres")

    def __init__(self, url: str, *, durability: str = "full", connect_timeout: float = 10.0):
        if durability not in DURABILITY:
            raise StoreError(f"durability {durability!r} is not one of: full, normal")
        try:
            import psycopg
            from psycopg.rows import dict_row
        except ImportError as error:
            raise StoreError("a PostgreSQL database needs psycopg: "
                             "pip install 'taskherd[postgres]'") from error
        self._psycopg, self._errors, self._dict_row = psycopg, psycopg.errors, dict_row
        self.url = url
        self._durability = durability
        self._connect_timeout = max(1, round(connect_timeout))
        self._held_node: str | None = None
        self._lock = threading.RLock()
        self._conn = self._connect()
        try:
            _migrate(self._conn)
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> Any:
        try:
            conn = _opening_connection().connect(
                self.url, autocommit=True, row_factory=self._dict_row,
                connect_timeout=self._connect_timeout)
        except self._psycopg.OperationalError as error:
            # The caller names the database (without its password); psycopg's words say why.
            raise StoreUnavailable(f"cannot connect: {_said(error)}") from error
        conn.execute(M[f"durability_{self._durability}"])
        return conn

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """The connection, opened again if the last one was lost (a server restart, a
        failover, an idle timeout); a database error becomes a StoreError for the caller.

        The daemon's loops log a StoreError and try again on their next pass, so a node rides
        out a database outage instead of exiting; what a lost COMMIT did is settled by the
        guards every transition has (a repeated claim takes another task; the first one's
        lease expires and it is rescued).
        """
        with self._lock:
            if self._conn.closed or self._conn.broken:
                self._conn = self._connect()
                if self._held_node is not None:
                    self.hold_node(self._held_node)
            try:
                yield self._conn
            except self._errors.DiskFull as error:  # the server's disk: nothing was written
                raise StoreDiskFull(_said(error)) from error
            except (self._psycopg.OperationalError, self._psycopg.InterfaceError) as error:
                # Lost connections, deadlocks, serialization failures: all worth a retry.
                raise StoreUnavailable(f"database error: {_said(error)}") from error

    # The events' payloads the transaction under way sends with its COMMIT (the store's lock
    # is held throughout, so they are its own).
    _notifying: Sequence[str] = ()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """Begun and ended by hand, not by psycopg's `transaction()`, to save round trips: the
        BEGIN goes with the first statement (`_opening_connection`), and the end goes as one
        simple query, the events' NOTIFY with the COMMIT. On a loaded machine each round trip
        waits for both processes to be scheduled again."""
        with self._connection() as conn:
            idle = self._psycopg.pq.TransactionStatus.IDLE
            if conn.opening or conn.info.transaction_status != idle:
                conn.open_now()
                with conn.transaction():  # inside another: a savepoint, as psycopg makes
                    yield conn
                return
            conn.opening = (M["transaction_begin"],)
            self._notifying = ()
            try:
                yield conn
                if conn.opening and not self._notifying:
                    return  # nothing was sent: nothing to end
                conn.open_now()
                if conn.info.transaction_status == idle:
                    # The body sent its COMMIT with its last statements (a claim does).
                    if self._notifying:
                        raise StoreError("a transaction committed before its events were sent")
                    return
                conn.execute(self._commit(), prepare=False)
            except BaseException:
                if not conn.opening and not conn.broken and not conn.closed:
                    with contextlib.suppress(self._psycopg.Error):
                        conn.execute(M["transaction_rollback"], prepare=False)
                raise
            finally:
                conn.opening = ()

    def _commit(self) -> Any:
        """The COMMIT, then the events in a transaction of their own, in one simple query
        (each payload a literal psycopg quotes: a simple query takes no parameters).

        Apart, because PostgreSQL orders notifying commits with a lock held until each has
        committed, its disk flush included: events sent with a run's end made every other
        node's notifying commit (claims too, under the claims' lock) wait for that flush. The
        events' own commit need not wait for the disk (event_without_flush)."""
        from psycopg import sql

        if not self._notifying:
            return sql.SQL(M["transaction_commit"])
        statements = [M["transaction_commit"], M["transaction_begin"], M["event_without_flush"]]
        events = [sql.SQL(M["notify_event"]).format(payload=sql.Literal(payload))
                  for payload in self._notifying]
        return sql.SQL(" ").join([*map(sql.SQL, statements), *events,
                                  sql.SQL(M["transaction_commit"])])

    @contextmanager
    def _read(self) -> Iterator[Any]:
        with self._connection() as conn:
            yield conn

    def _insert_many(self, db: Any, name: str, rows: Iterable[Mapping[str, Any]]) -> int:
        db.open_now()
        with db.cursor() as cursor:
            cursor.executemany(self.q[name], list(rows))
            return max(int(cursor.rowcount), 0)

    def _insert_tasks(self, db: Any, batch: Sequence[NewTask], now: float) -> int:
        # One statement for the batch (insert_tasks): executemany sends one a task, and a
        # batch of 1,000 ran at under a third of the rate (bench/postgres.py, batched enqueue).
        # SQLite keeps executemany, faster there than one statement over json_each.
        rows = json.dumps([task_params(new, now) for new in batch])
        cursor = db.execute(self.q["insert_tasks"], {"rows": rows, "now": now})
        return max(int(cursor.rowcount), 0)

    def _inserted(self, cursor: Any) -> tuple[int, Mapping[str, Any]]:
        row = cursor.fetchone()  # insert_task returns the row in this dialect
        return int(row["id"]), row

    def _is_foreign_key_error(self, error: Exception) -> bool:
        return isinstance(error, self._errors.ForeignKeyViolation)

    def _is_unique_error(self, error: Exception) -> bool:
        return isinstance(error, self._errors.UniqueViolation)

    def _claim_started(self, db: Any) -> None:
        db.open_with(M["claim_settings"])

    def _order_claims(self, db: Any) -> None:
        db.execute(M["limits_lock"])  # granted when its result is read, in a pipeline too

    def _together(self, db: Any) -> Any:
        return db.pipeline()

    _claim_within_call = M["claim_within_call"]

    def _try_candidate(self, request: ClaimRequest, limits: ClaimLimits, allowed: list[str],
                   full: list[str]) -> Claim | Refusal | None:
        """As SQLStore's, but one call of claim_within_function: the candidate, the lock, the
        count, the claim, its inbox and its event in one statement, committed on the server.
        A budget is read and judged in Python between the count and the claim, so a claim
        that may meet a budgeted role takes the steps; so does a connection that may not
        create the function."""
        if _budgeted(limits, allowed):
            return super()._try_candidate(request, limits, allowed, full)
        with self._connection() as conn:
            if not self._has_server_calls(conn):
                return super()._try_candidate(request, limits, allowed, full)
            answer = conn.execute(self._claim_within_call,
                                  self._claim_call_params(request, limits, allowed, full)
                                  ).fetchone()["claimed"]
        return self._candidate_answered(request, limits, answer)

    def _candidate_answered(self, request: ClaimRequest, limits: ClaimLimits,
                            answer: Mapping[str, Any] | None) -> Claim | Refusal | None:
        """The claim (or refusal, or None: no ready task) claim_within_function answered."""
        if answer is None:
            return None
        candidate, role = answer["task"], answer["role"]
        counted = usage_params(request.node, request.now, limits, role, candidate["pool"])
        if (answer["pool_a"], answer["pool_b"]) != (counted["pool_a"], counted["pool_b"]):
            raise StoreError(f"the claim of task {candidate['id']} counted pools "
                             f"{answer['pool_a']}, {answer['pool_b']} where its limits "
                             f"name {counted['pool_a']}, {counted['pool_b']}")
        return self._claim_answered(request, limits, candidate, role, answer["claim"], counted,
                                    answer["messages"])

    # The last claim's limits, its roles' runtimes and their terms as JSON: a daemon claims
    # with one ClaimLimits a whole pass, and the terms' dumps were a tenth of a claim's time.
    _limit_terms: tuple[ClaimLimits | None, tuple[tuple[str, str | None], ...], str, str] = (
        None, (), "", "")

    def _claim_call_params(self, request: ClaimRequest, limits: ClaimLimits, allowed: list[str],
                           full: list[str]) -> dict[str, Any]:
        now, inbox = request.now, request.inbox
        runtimes = tuple((role, request.runtime_for(role)) for role in allowed)
        known, known_runtimes, role_limits, pool_limits = self._limit_terms
        if known is not limits or known_runtimes != runtimes:
            role_limits = json.dumps({role: _role_terms(limits, role, runtime)
                                      for role, runtime in runtimes})
            pool_limits = json.dumps({name: {"capacity": pool.capacity,
                                             "node_scope": pool.scope == NODE}
                                      for name, pool in limits.pools.items()})
            self._limit_terms = (limits, runtimes, role_limits, pool_limits)
        return {
            "now": now, "node": request.node, "lease_until": now + request.lease_seconds,
            "role_limits": role_limits, "pool_limits": pool_limits,
            # The event as the base store emits it, but for what the database adds: the
            # task's id and role, and the run's id if the claim is made.
            "event": Event(EventKind.TASK_CHANGED, now, state=TaskState.CLAIMED).to_json(),
            "task_address_prefix": TASK_ADDRESS,
            "inbox_messages": inbox.messages if inbox else None,
            "inbox_bytes": inbox.bytes if inbox else None,
            "roles": json.dumps(allowed), "full_pools": json.dumps(full) if full else None,
            "any_role": request.any_role(allowed),
            "token_sha256": (token_digest(request.credential)
                             if request.credential is not None else None),
        }

    def _has_server_calls(self, conn: Any) -> bool:
        """Whether this connection has the SERVER_CALLS, created in its temporary schema the
        first time it is asked: they last as long as the connection (a new one after a loss
        creates its own), and they are always this taskherd's, whatever version another node
        runs on the same database. A role without the TEMPORARY privilege cannot create
        them, and claims, ends runs and adds tasks in steps."""
        if conn.server_calls is None:
            try:
                with conn.transaction():
                    for name in SERVER_CALLS:
                        conn.execute(function_definition("postgres", name))
                conn.server_calls = True
            except self._errors.InsufficientPrivilege as error:
                log.warning("claims, run ends and enqueues take several round trips: the "
                            "database role cannot create a temporary function (%s)",
                            _said(error))
                conn.server_calls = False
        return bool(conn.server_calls)

    def _claim_answered(self, request: ClaimRequest, limits: ClaimLimits,
                        candidate: Mapping[str, Any], role: str, answer: Mapping[str, Any],
                        counted: Mapping[str, Any],
                        inbox: Iterable[Mapping[str, Any]]) -> Claim | Refusal:
        """The claim (or refusal) claim_within_function committed for `candidate`, with the
        inbox it delivered. The database judged the counts with the tests of
        policy/admission.py's rule (claim_if_room's `has_room`), under the lock; the rule
        itself judges the same counts again, for the words, and must agree."""
        task_id, task_pool = candidate["id"], candidate["pool"]
        now, node = request.now, request.node
        row = dict(answer)
        refusal = admission.refusal(limits, role, task_pool, usage_of(row, counted), now)
        if not row.pop("has_room"):
            if refusal is None:
                raise StoreError(f"the claim of task {task_id} found no room for role "
                                 f"{role} where its limits see some: {usage_of(row, counted)}")
            return refusal
        if row["id"] is None:
            raise StoreError(f"task {task_id} was not claimed as its limits allowed "
                             "(no longer ready)")
        if refusal is not None:
            # Committed already: the database's count, made under the lock, holds; the
            # words are the only thing that disagrees.
            log.error("task %s was claimed by run %s although its limits' words say: %s",
                      task_id, row["id"], refusal.reason)
        for column in USAGE_COLUMNS:
            del row[column]
        messages = sorted(map(Message.from_row, inbox),  # in undelivered_for_run's order
                          key=lambda message: (-message.priority, message.id))
        # The candidate's row was locked from its read to the claim: the task claimed is that
        # row with what claim_if_room set.
        task = Task.from_row({**candidate, "state": TaskState.CLAIMED.value, "lease_node": node,
                              "lease_expires_at": now + request.lease_seconds,
                              "updated_at": now})
        # The credential, if the request brought one, was recorded with the claim.
        return Claim(task, Run.from_row(row), tuple(messages), request.credential)

    def _server_call(self, call: str, params: Mapping[str, Any]) -> Any:
        """The answer of a SERVER_CALLS procedure `call` (it commits on the server), or None
        where it cannot be called: a transaction is under way (a procedure that commits is
        refused inside one), or the connection may not create it."""
        with self._connection() as conn:
            idle = self._psycopg.pq.TransactionStatus.IDLE
            if (conn.opening or conn.info.transaction_status != idle
                    or not self._has_server_calls(conn)):
                return None
            return conn.execute(call, params).fetchone()["answer"]

    _enqueue_call = M["enqueue_call"]

    def enqueue(self, new: NewTask, now: float, allowance: SpawnAllowance | None = None,
                once: RequestKey | None = None) -> Enqueued:
        """As SQLStore's, but one call of enqueue_procedure where neither a run's spawns
        are counted nor an agent's request noted: the INSERT, the COMMIT and the event in one
        round trip. A duplicate of an open task, which it does not add, takes the steps."""
        if allowance is None and once is None:
            params = task_params(new, now)
            # The event as SQLTasks emits it, but for the task's id, which the database adds.
            params["event"] = Event(EventKind.TASK_ADDED, now, state=TaskState(params["state"]),
                                    role=new.role).to_json()
            with self._parents_checked([new]):
                answer = self._server_call(self._enqueue_call, params)
            if answer is not None:
                return Enqueued(Task.from_row(answer), created=True)
        return super().enqueue(new, now, allowance, once)

    _finish_run_call = M["finish_run_call"]

    def finish_run(self, run_id: int, result: RunResult, policy: RetryPolicy,
                   now: float) -> Finished:
        """As SQLStore's, but one call of finish_run_procedure where the settle is plain (its
        settlement known before the task is read, and nothing set off beyond it): the run's
        end, the task's settle, the COMMIT and the events in one round trip. The procedure
        answers nothing, and writes nothing, where the steps are needed."""
        settlement = _plain_settlement(result, now)
        if settlement is not None:
            answer = self._server_call(self._finish_run_call,
                                       self._finish_call_params(run_id, result, settlement, now))
            if answer is not None:
                return _finished(answer)
        return super().finish_run(run_id, result, policy, now)

    _finish_and_claim_call = M["finish_and_claim_call"]

    def finish_run_and_claim(self, run_id: int, result: RunResult, policy: RetryPolicy,
                             now: float, request: ClaimRequest) -> tuple[Finished, ClaimAttempt]:
        """As the Store's, but one call of finish_and_claim_procedure where the run's end is
        plain (as finish_run's one call) and the claim within limits is claim_within_function's
        (no budget to read in Python): the end, its durable COMMIT, its events, the first
        candidate's claim (or refusal) and the claim's event in one round trip. The candidates
        after a refusal are tried one call each, as attempt_claim tries them.

        Anything else (a settle the procedure leaves to the steps, a claim without limits or
        with a budget, a role without TEMPORARY) takes the parent's way.

        The claim within limits is made after the end's COMMIT, not in its transaction: the
        claims' lock would be held through the end's disk flush, and every node's claims
        would queue behind it (the reason a claim alone does not wait for the disk)."""
        limits, allowed = request.limits, list(request.roles or ())
        settlement = _plain_settlement(result, now)
        if settlement is None or limits is None or not allowed or _budgeted(limits, allowed):
            return super().finish_run_and_claim(run_id, result, policy, now, request)
        full = list(request.full_pools)
        params = self._claim_call_params(request, limits, allowed, full)
        params["claim_now"] = request.now
        params.update(self._finish_call_params(run_id, result, settlement, now))
        answer = self._server_call(self._finish_and_claim_call, params)
        if answer is None or answer["finished"] is None:  # nothing written: the parent's way
            return super().finish_run_and_claim(run_id, result, policy, now, request)
        finished = _finished(answer["finished"])
        try:
            return finished, self._claims_from(self._fused_claim(request, limits, answer),
                                               request, limits, allowed, full)
        except StoreError as error:
            log.warning("the claim after run %s ended was not made: %s", run_id, error)
            return finished, ClaimAttempt(None)

    def _fused_claim(self, request: ClaimRequest, limits: ClaimLimits,
                     answer: Mapping[str, Any]) -> Claim | Refusal | None:
        """The first candidate's claim the fused call answered, or its failure raised as the
        error the server met, a StoreError where it is the store's (_connection says which)."""
        if "claim_error" in answer:
            with self._connection():
                error = self._errors.lookup(answer["claim_error"])
                raise error(answer["claim_message"])
        return self._candidate_answered(request, limits, answer["claimed"])

    def _claims_from(self, claimed: Claim | Refusal | None, request: ClaimRequest,
                     limits: ClaimLimits, allowed: list[str], full: list[str]) -> ClaimAttempt:
        """The attempt that began with the candidate `claimed`: after a refusal, the next
        candidate is tried as SQLClaims._claim_within tries it."""
        refused: list[Refusal] = []
        while isinstance(claimed, Refusal):
            refused.append(claimed)
            pass_by(claimed, allowed, full)
            if not allowed:
                return ClaimAttempt(None, tuple(refused))
            claimed = self._try_candidate(request, limits, allowed, full)
        return ClaimAttempt(claimed, tuple(refused))

    # The workflow _slow_roles last read, and its answer: a reload gives the store a new one.
    _slow_roles_of: tuple[Workflow | None, str] = (None, "[]")

    def _slow_roles(self) -> str:
        workflow, roles = self._slow_roles_of
        if workflow is not self.workflow:
            workflow, roles = self.workflow, _slow_roles(self.workflow)
            self._slow_roles_of = (workflow, roles)
        return roles

    def _finish_call_params(self, run_id: int, result: RunResult, settlement: Settlement,
                            now: float) -> dict[str, Any]:
        return {
            "run_id": run_id, "now": now, "outcome": result.outcome.value,
            "exit_code": result.exit_code, "summary": result.summary, "error": result.error,
            "error_tail": result.error_tail, "cost_usd": result.cost_usd,
            "input_tokens": result.input_tokens, "output_tokens": result.output_tokens,
            "turns": result.turns, "session_id": result.session_id,
            "state": settlement.state.value, "run_after": settlement.run_after,
            "strike": settlement.strike, "rescue": settlement.rescue,
            "rate_limit": settlement.rate_limit, "reason": settlement.reason,
            "slow_roles": self._slow_roles(), "slow_meta": SETTLE_META,
            # The events as SQLRuns._finish emits them, but for what the database adds.
            "run_ended": Event(EventKind.RUN_ENDED, now).to_json(),
            "task_changed": Event(EventKind.TASK_CHANGED, now).to_json(),
        }

    def _announce(self, db: Any, outbox: Sequence[Emitted]) -> None:
        self._notifying = [event.to_json() for event in built(outbox)]  # sent with the COMMIT

    def _text_query(self, words: Sequence[str]) -> str:
        # The words are letters and digits (query_words): nothing to_tsquery reads as an
        # operator; | so an entry matching some words still ranks.
        return " | ".join(words)

    def listen(self) -> NotifyListener:
        return NotifyListener(self.url, self._connect_timeout)

    def backup(self, destination: Path) -> None:
        raise StoreError("a PostgreSQL database is backed up with its own tools: "
                         "pg_dump (or the server's base backups and WAL archiving)")

    def hold_node(self, node: str) -> None:
        # A session advisory lock: held while this connection lives, dropped by the server
        # when the daemon dies however it dies. Two daemons with one node name on two hosts
        # would renew each other's leases and adopt each other's runs.
        with self._connection() as conn:
            held = conn.execute(M["try_node_lock"], {"node": node}).fetchone()["held"]
        if not held:
            raise StoreError(f"another taskherd daemon already runs as node {node!r} on this "
                             "database (maybe on another host): stop it, or give this one "
                             "another [daemon] node")
        self._held_node = node  # taken again on a new connection

    def probe_write(self) -> None:
        tables = ("tasks", "runs", "cooldowns", "jobs", "job_fires")
        with self._connection() as conn:
            missing = [table for table in tables if not conn.execute(
                M["may_write_table"], {"table": table}).fetchone()["granted"]]
        if missing:
            raise StoreError("the role lacks SELECT, INSERT, UPDATE or DELETE on "
                             f"{', '.join(missing)}")

    def probe_claims(self) -> str | None:
        with self._connection() as conn:
            row = conn.execute(M["may_create_temporary"]).fetchone()
        if row["granted"]:
            return None
        return (f"role {row['role']} may not create temporary objects in database "
                f"{row['database']}: claims within limits, runs' ends and enqueues take "
                f"several round trips each (GRANT TEMPORARY ON DATABASE {row['database']} TO "
                f"{row['role']})")

    def checkpoint(self, truncate: bool = False, timeout: float | None = None) -> bool:
        """Nothing to do: PostgreSQL checkpoints its own write-ahead log."""
        return True

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _role_terms(limits: ClaimLimits, role: str, run_runtime: str | None) -> dict[str, Any]:
    """What claim_within_function needs of a role's limits (usage_params and
    ClaimLimits.crosses_nodes read the same): the pools' terms go apart, by pool."""
    limit = limits.role(role)
    return {"max_concurrent": limit.max_concurrent, "stagger": float(limit.stagger),
            "node_scope": limit.scope == NODE, "pool": limit.pool, "runtime": limit.runtime,
            "run_runtime": run_runtime, "crosses_nodes": limits.role_counted_across_nodes(role)}


def _plain_settlement(result: RunResult, now: float) -> Settlement | None:
    """The settlement finish_run_procedure may make of `result`, or None: the steps'."""
    return None if result.outcome is Outcome.LOST else plain_settlement(result, now)


def _finished(answer: Mapping[str, Any]) -> Finished:
    """finish_run_procedure's answer as the Finished the steps return."""
    return Finished(Run.from_row(answer["run"]), Task.from_row(answer["task"]),
                    moved=answer["moved"])


def _budgeted(limits: ClaimLimits, roles: Iterable[str]) -> bool:
    """Whether a claim of `roles` may meet a budget: read and judged in Python, so claimed in
    steps (claim_within_function has no budget's terms)."""
    return any(limits.budget_scopes(role) for role in roles)


def _slow_roles(workflow: Workflow) -> str:
    """The roles whose settle may set off more than itself (a reviewer's task, a chain's
    children), as JSON: finish_run_procedure leaves their runs' ends to the steps."""
    return json.dumps(sorted(name for name, flow in workflow.roles.items()
                             if flow.review_by is not None or flow.chain))


@functools.cache
def _opening_connection() -> Any:
    """psycopg's connection, with the opening of a transaction sent with its first statement.

    `opening` holds the statements owed before the next one (the BEGIN, and a claim's
    settings): the next `execute` sends them and itself in one round trip (a pipeline), or
    within the pipeline under way. Only `execute` sends them: what reaches the server another
    way (a cursor's executemany, a savepoint) calls `open_now` first."""
    import psycopg

    class OpeningConnection(psycopg.Connection):
        opening: tuple[str, ...] = ()
        server_calls: bool | None = None  # PostgresStore._has_server_calls

        def open_with(self, statement: str) -> None:
            """`statement` sent with the opening still owed, or at once if none is."""
            if self.opening:
                self.opening += (statement,)
            else:
                super().execute(statement, prepare=False)

        def open_now(self) -> None:
            opening, self.opening = self.opening, ()
            if opening:
                with self._piped():
                    for statement in opening:
                        super().execute(statement, prepare=False)

        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                    binary: bool = False) -> Any:
            if not self.opening:
                return super().execute(query, params, prepare=prepare, binary=binary)
            with self._piped():
                self.open_now()  # in the same pipeline
                return super().execute(query, params, prepare=prepare, binary=binary)

        def _piped(self) -> Any:
            if self.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
                return contextlib.nullcontext()  # the pipeline under way carries them
            return self.pipeline()

    return OpeningConnection


class NotifyListener(Listener):
    """A listener of a PostgreSQL database: a LISTENing connection of its own, opened again
    after a loss (meanwhile the events of other nodes are missed: the daemon's poll covers)."""

    def __init__(self, url: str, connect_timeout: int):
        super().__init__()
        self.url = url
        self._connect_timeout = connect_timeout
        self._conn: Any = None
        self._reader: asyncio.Task[None] | None = None

    async def _connect(self) -> Any:
        import psycopg

        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=self._connect_timeout)
            await conn.execute(M["listen_events"])
        except psycopg.OperationalError as error:
            raise StoreUnavailable(f"cannot listen: {_said(error)}") from error
        return conn

    async def _start(self) -> None:
        self._conn = await self._connect()
        self._reader = asyncio.create_task(self._read(), name="taskherd events")

    async def _read(self) -> None:
        import psycopg

        while True:
            try:
                async for note in self._conn.notifies():
                    self._received(note.payload)
            except psycopg.OperationalError as error:
                log.warning("events from other nodes paused (%s); retrying in %.0f s",
                            _said(error), RELISTEN_DELAY)
            await self._conn.close()
            while True:
                await asyncio.sleep(RELISTEN_DELAY)
                try:
                    self._conn = await self._connect()
                    break
                except StoreUnavailable as error:
                    log.warning("%s; retrying in %.0f s", error, RELISTEN_DELAY)

    def _received(self, payload: str) -> None:
        try:
            event = Event.from_json(payload)
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed event notification: %r", payload[:200])
            return
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(event)

    async def _stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


def _said(error: Exception) -> str:
    """psycopg's message on one line (libpq's span several), for logs and the CLI."""
    return " ".join(str(error).split()) or type(error).__name__


def _apply(db: Any, version: int, statement: str) -> None:
    """One statement of migration `version`; an extension the role may not create (or the
    server lacks) is said in words a person can act on, not as the server's error alone."""
    import psycopg

    extension = re.search(r"^CREATE EXTENSION IF NOT EXISTS (\w+)", statement, re.MULTILINE)
    try:
        db.execute(statement)
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFile) as error:
        if not extension:
            raise
        name = extension.group(1)
        raise StoreError(
            f"migration {version} needs PostgreSQL's {name} extension, which this role cannot "
            f"create ({_said(error)}): a role with CREATE on the database (or a superuser) "
            f"runs 'CREATE EXTENSION IF NOT EXISTS {name};' in it once (the server's contrib "
            f"package provides it), then taskherd starts; see docs/operating.md") from None


def _migrate(db: Any) -> None:
    """Apply the numbered migrations not yet recorded, all in one transaction, by one node at
    a time (an advisory lock): several nodes starting together apply each migration once.
    A schema newer than this taskherd knows is refused, naming the release it needs."""
    with db.transaction():
        db.execute(M["migration_lock"])
        if not db.execute(M["has_schema_migrations"]).fetchone()["present"]:
            db.execute(M["create_schema_migrations"])
        applied = {row["version"] for row in db.execute(M["applied_migrations"])}

        def release_of(version: int) -> str | None:
            row = db.execute(M["release_of_schema"], {"version": version}).fetchone()
            return row["taskherd"] if row else None

        refused = newer_schema_error(applied, release_of, "postgres")
        if refused:
            raise StoreError(refused)
        for migration in pending("postgres", applied):
            for statement in migration.statements():
                _apply(db, migration.version, statement)
            db.execute(M["record_migration"], {"version": migration.version,
                                               "name": migration.name, "now": time.time()})
        known = latest_migration("postgres")
        if release_of(known) is None:
            db.execute(M["record_release"], {"version": known, "taskherd": __version__})
