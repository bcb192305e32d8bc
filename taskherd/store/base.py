"""The store interface: one method per transition of the state machine (docs/states.md),
plus the reads callers need.

Every transition is one transaction guarded by the expected state. A transition that finds
the task elsewhere raises `TransitionRefused` with the state it found, so the caller learns
that someone else moved it. Every method takes `now` (unix seconds): nothing reads a clock.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from taskherd.model import (
    Claim,
    Cooldown,
    Finished,
    GateCheck,
    NewTask,
    Run,
    RunResult,
    Task,
    TaskState,
)
from taskherd.model.record import Record
from taskherd.model.settings import RetryPolicy
from taskherd.policy.chains import Workflow
from taskherd.store.agents import AgentStore
from taskherd.store.charts import ChartStore
from taskherd.store.delivery import DeliveryStore
from taskherd.store.errors import (
    ParentNotFound,
    RunNotFound,
    SpawnAllowance,
    StoreError,
    StoreUnavailable,
    TaskNotFound,
    TransitionRefused,
)
from taskherd.store.events import Listener
from taskherd.store.jobs import JobStore
from taskherd.store.memory import MemoryStore
from taskherd.store.messages import MessageStore
from taskherd.store.nodes import NodeStore
from taskherd.store.reports import ReportStore
from taskherd.store.requests import RequestKey, RequestStore
from taskherd.store.task_lists import TaskListStore
from taskherd.store.tokens import TokenStore
from taskherd.store.watch import WatchStore
from taskherd.store.worktrees import WorktreeStore

if TYPE_CHECKING:  # admission's records are the daemon's: see sql_claims.py
    from taskherd.policy.admission import ClaimAttempt, ClaimRequest

__all__ = [
    "ParentNotFound", "RunNotFound", "StoreError", "StoreUnavailable", "TaskNotFound",
    "TransitionRefused",
]

# Maps a role to its retry policy: the config knows the roles, the store does not.
PolicyLookup = Callable[[str], RetryPolicy]


class Enqueued(Record):
    """What an enqueue did: the task added, or the open one its dedup key named."""

    task: Task
    created: bool  # False: an open task with the same dedup key was returned instead


class StateCount(Record):
    """How many tasks of a role are in a state."""

    state: TaskState
    role: str
    count: int



def warn_claim_not_made(run_id: int, error: StoreError) -> None:
    """Say why the claim after run `run_id`'s end was not made (the end stands)."""
    import logging  # (here: a command's start does not load logging)

    logging.getLogger("taskherd.store").warning(
        "the claim after run %s ended was not made: %s", run_id, error)

class Store(JobStore, NodeStore, WatchStore, TokenStore, MessageStore, AgentStore,
            MemoryStore, DeliveryStore, RequestStore, TaskListStore, ReportStore,
            WorktreeStore, ChartStore, abc.ABC):
    """A durable task queue. Implementations: `SQLiteStore` (and later PostgreSQL)."""

    # The roles' chains and reviewers (`policy.chains.workflow_of(config)`): given when the
    # store is opened for a config, and again when the daemon reloads it.
    workflow: Workflow

    # -- run credentials: what an agent holds instead of the database -------------------

    @abc.abstractmethod
    def issue_run_credential(self, run_id: int, token: str, now: float) -> None:
        """Accept `token` for run `run_id` while the run is open; only its hash is kept."""

    @abc.abstractmethod
    def run_of_credential(self, token: str) -> Run | None:
        """The open run `token` was issued for; None for an unknown token or an ended run."""

    @abc.abstractmethod
    def record_reported_usage(self, run_id: int, *, cost_usd: float | None,
                              input_tokens: int | None, output_tokens: int | None) -> None:
        """Keep the cost and tokens an agent reported (None: unknown, left as it was)."""

    # -- tasks ---------------------------------------------------------------------------

    @abc.abstractmethod
    def enqueue(self, new: NewTask, now: float, allowance: SpawnAllowance | None = None,
                once: RequestKey | None = None) -> Enqueued:
        """Add `new`; with `allowance`, only if its run may still add one (else
        SpawnLimitReached, and nothing is added); with `once`, noted as that agent request's
        work (`store/requests.py`)."""

    @abc.abstractmethod
    def enqueue_many(self, batch: Sequence[NewTask], now: float) -> int:
        """All or nothing, in one transaction; returns how many tasks were created."""

    @abc.abstractmethod
    def get_task(self, task_id: int) -> Task: ...

    @abc.abstractmethod
    def list_tasks(
        self, *, state: TaskState | None = None, role: str | None = None, limit: int = 100
    ) -> list[Task]: ...

    @abc.abstractmethod
    def waiting_at_priority(self, priority: int, *, limit: int = 50) -> list[Task]:
        """Ready tasks of `priority` in claim order, then those pending approval, oldest
        first: at most `limit` of each, read through indexes whatever the history's size."""

    @abc.abstractmethod
    def page_tasks(self, *, state: TaskState | None = None, role: str | None = None,
                   before_id: int | None = None, limit: int = 100) -> list[Task]:
        """Tasks newest first, those with an id below `before_id` (a cursor) when given."""

    @abc.abstractmethod
    def children_of(self, task_id: int, limit: int = 100) -> list[Task]:
        """The tasks whose parent is `task_id`, oldest first."""

    @abc.abstractmethod
    def counts(self) -> list[StateCount]: ...

    # -- the worker's path: claim → spawned → heartbeat → finish ---------------------------

    @abc.abstractmethod
    def attempt_claim(self, request: ClaimRequest) -> ClaimAttempt:
        """Lease the first ready task (P0 first, FIFO within a priority) that `request` may
        take and open its run (ClaimRequest says what each of its fields asks); with the
        claim, why each candidate passed by on the way could not start."""

    @abc.abstractmethod
    def claim(self, request: ClaimRequest) -> Claim | None:
        """The claim `attempt_claim` makes, if it makes one."""

    @abc.abstractmethod
    def mark_spawned(
        self,
        run_id: int,
        now: float,
        lease_seconds: float,
        *,
        pid: int | None,
        pid_started_at: float | None,
        log_path: str | None,
    ) -> Task: ...

    @abc.abstractmethod
    def heartbeat(
        self, run_id: int, now: float, lease_seconds: float, progress: str | None = None
    ) -> Run: ...

    @abc.abstractmethod
    def renew_leases(self, node: str, now: float, lease_seconds: float) -> int: ...

    @abc.abstractmethod
    def finish_run(
        self, run_id: int, result: RunResult, policy: RetryPolicy, now: float
    ) -> Finished: ...

    def finish_run_and_claim(self, run_id: int, result: RunResult, policy: RetryPolicy,
                             now: float, request: ClaimRequest) -> tuple[Finished, ClaimAttempt]:
        """`finish_run`, then `attempt_claim(request)`: the node whose run ended takes the
        next task for the slot it freed. A store may write both in one transaction (one
        commit where there were two). The run's end stands whatever the claim meets: a claim
        the store cannot make for its own reasons (unavailable, disk full) is answered as
        none, and the node's next dispatch pass claims as it always does. A run's end the
        store refuses raises as `finish_run`'s, and nothing is claimed."""
        from taskherd.policy.admission import ClaimAttempt

        finished = self.finish_run(run_id, result, policy, now)
        try:
            return finished, self.attempt_claim(request)
        except StoreError as error:
            warn_claim_not_made(run_id, error)
            return finished, ClaimAttempt(None)

    @abc.abstractmethod
    def report(self, run_id: int, verdict: str, now: float, summary: str | None = None) -> Run:
        """Record the agent's own word on its run (done, fail, block); settled at exit. The
        first report stands: the same one again is answered with the run, another refused
        (`ReportRefused`)."""

    @abc.abstractmethod
    def open_runs_of_final_tasks(self, node: str) -> list[Run]:
        """Runs still open on `node` whose task is no longer leased (e.g. cancelled), or whose
        task a newer run holds (cancelled, requeued and claimed again): agents to stop."""

    # -- runtime cooldowns (rate limits) -------------------------------------------------

    @abc.abstractmethod
    def set_cooldown(self, runtime: str, until: float, reason: str, now: float,
                     span: float | None = None) -> Cooldown:
        """Pause `runtime` until `until`; `span` is the length the daemon guessed, if it had to."""

    @abc.abstractmethod
    def cooldown_of(self, runtime: str) -> Cooldown | None:
        """The runtime's last cooldown, lifted or not (None if it never had one)."""

    @abc.abstractmethod
    def active_cooldowns(self, now: float) -> list[Cooldown]: ...

    @abc.abstractmethod
    def clear_cooldown(self, runtime: str) -> bool: ...

    # -- budget pauses (the cooldowns budget:SCOPE) -------------------------------------

    @abc.abstractmethod
    def pause_budget(self, scope: str, until: float, reason: str, targets: Sequence[str],
                     now: float) -> bool:
        """Pause `scope`'s spawns until `until`; True (and the event, and an outbox row per
        delivery alias in `targets`) only for the call that began the pause."""

    @abc.abstractmethod
    def lift_budget_pause(self, scope: str, until: float, targets: Sequence[str],
                          now: float) -> bool:
        """End the pause of `scope` that ran until `until`; True (and the event, and the
        outbox rows) only for the call that ended it."""

    @abc.abstractmethod
    def rescue_expired(self, now: float, policy_for: PolicyLookup) -> list[Finished]:
        """Return every task whose lease expired to `ready` (no strike), ending its run `lost`."""

    # -- a person's transitions ----------------------------------------------------------

    @abc.abstractmethod
    def cancel(self, task_id: int, now: float, reason: str | None = None) -> Task: ...

    @abc.abstractmethod
    def approve(self, task_id: int, now: float) -> Task:
        """pending → ready, needs_review → completed."""

    @abc.abstractmethod
    def reject(self, task_id: int, now: float, reason: str | None = None) -> Task:
        """needs_review → ready."""

    @abc.abstractmethod
    def block(self, task_id: int, now: float, reason: str | None = None) -> Task: ...

    @abc.abstractmethod
    def unblock(self, task_id: int, now: float) -> Task: ...

    @abc.abstractmethod
    def requeue(self, task_id: int, now: float) -> Task:
        """dead or cancelled → ready with fresh counts; the run history is kept."""

    # -- workflows: chains, reviews, gates, the planner's view ------------------------------

    @abc.abstractmethod
    def cancel_tree(self, task_id: int, now: float, reason: str | None = None) -> list[Task]:
        """Cancel a task and every open task below it in its chain, in one transaction (a
        finished task's open descendants too); the cancelled tasks, the task first."""

    @abc.abstractmethod
    def tree(self, task_id: int) -> tuple[list[Task], dict[int, Run]]:
        """The chain `task_id` belongs to, from its root, and each task's latest run."""

    @abc.abstractmethod
    def review_verdict(self, review_task_id: int, verdict: str, reason: str | None,
                       now: float, once: RequestKey | None = None) -> Task:
        """A reviewer's verdict ("approve" or "reject") on the task its review task reviews
        (with `once`, noted as that agent request's work)."""

    @abc.abstractmethod
    def gate_started(self, run_id: int, name: str, log_path: str | None, now: float, *,
                     pid: int | None = None, pid_started_at: float | None = None) -> int:
        """Record a gate check of a run; `pid`/`pid_started_at`: its process, found again
        after a restart."""

    @abc.abstractmethod
    def gate_ended(self, gate_id: int, now: float, *, exit_code: int | None, passed: bool,
                   error: str | None = None) -> None: ...

    @abc.abstractmethod
    def gates_of_run(self, run_id: int) -> list[GateCheck]:
        """A run's gate checks, oldest first: its gates' progress, read again after a restart."""

    @abc.abstractmethod
    def gates_of_task(self, task_id: int) -> list[GateCheck]: ...

    @abc.abstractmethod
    def children_since(self, task_id: int, since: float) -> int:
        """Tasks added below `task_id` since `since` (a run's max_spawn)."""

    @abc.abstractmethod
    def ready_count(self) -> int: ...

    @abc.abstractmethod
    def has_open_task_of_role(self, role: str) -> bool: ...

    @abc.abstractmethod
    def last_task_of_role(self, role: str) -> float | None:
        """When the newest task of `role` was created."""

    @abc.abstractmethod
    def recent_dead(self, since: float, limit: int = 5) -> list[Task]: ...

    @abc.abstractmethod
    def next_run_after(self, now: float) -> float | None:
        """When the earliest ready task that is not yet claimable becomes claimable."""

    # -- runs and housekeeping -----------------------------------------------------------

    @abc.abstractmethod
    def get_run(self, run_id: int) -> Run: ...

    @abc.abstractmethod
    def runs_of_task(self, task_id: int) -> list[Run]: ...

    @abc.abstractmethod
    def open_runs(self, node: str | None = None) -> list[Run]: ...

    @abc.abstractmethod
    def list_runs(
        self, *, role: str | None = None, since: float | None = None, limit: int = 100
    ) -> list[Run]: ...

    @abc.abstractmethod
    def prune(self, before: float) -> int:
        """Delete finished tasks (and their runs) that finished before `before`, and messages
        read, delivered or expired before it."""

    @abc.abstractmethod
    def roll_up(self, now: float) -> int:
        """Fold what the board has been reading live (tasks finished and runs ended since the
        last roll-up) into its counters; the number of rows folded. The daemon's monitor calls
        it, so that the claim and the settle need not keep those counters themselves."""

    @abc.abstractmethod
    def probe_write(self) -> None:
        """Raise StoreError unless this process may write every table (`taskherd doctor`);
        changes nothing."""

    def probe_claims(self) -> str | None:
        """Why claims here take a slower path than they could (`taskherd doctor` warns), or
        None; changes nothing."""
        return None

    @abc.abstractmethod
    def checkpoint(self, truncate: bool = False, timeout: float | None = None) -> bool:
        """Move the write-ahead log into the database; safe to call from another thread.

        `truncate` also empties the log, waiting up to `timeout` seconds for readers; False
        when a reader held it and the checkpoint could not complete (try again later)."""

    def backup(self, destination: Path) -> None:
        """Write a consistent copy of the whole database to `destination` (a new file)."""
        raise StoreError(f"{type(self).__name__} cannot back itself up")

    @abc.abstractmethod
    def listen(self) -> Listener:
        """The events committed from now on, by this process or any other sharing the database:

            async with store.listen() as events:
                async for event in events: ...

        An event is a hint that something changed, never the only record of it: a listener
        may miss some (it was not running, its connection was lost), so it reads the store.
        """

    def events_held(self) -> AbstractContextManager[None]:
        """Within it, the events this thread's commits make are told together when it ends,
        after the last commit, rather than one at a time (each commit still emits its own).
        For a caller committing a burst (the API's store thread): a listener is woken once
        for it. A store whose database delivers events itself (PostgreSQL) holds none."""
        return contextlib.nullcontext()

    def writes_grouped(self) -> AbstractContextManager[None]:
        """Within it, this thread's writing transactions are committed together when it ends
        (one commit, one fsync), each still kept or rolled back on its own; the group holds
        the store, so keep it to a few short writes. It raises at its end if that commit
        fails, and then none of them was kept. Events as in `events_held`, told only once
        committed. For a caller answering a burst of small writes (the API's store thread:
        an answer goes back only after the group's commit). A store that commits each
        transaction as it ends (PostgreSQL, here) groups none."""
        return contextlib.nullcontext()

    def hold_node(self, node: str) -> None:
        """Hold `node` for this store's lifetime, or raise StoreError naming who holds it.

        Where one host is all there is (SQLite), the daemon's file lock already does this.
        """

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
