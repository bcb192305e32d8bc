"""The words of DESIGN §1 as types: task states, run outcomes, priorities, and the records."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any


class TaskState(str, enum.Enum):
    PENDING = "pending"  # waits for approval (planner-created, or added with review gate)
    READY = "ready"  # claimable once run_after has passed
    CLAIMED = "claimed"  # a node holds the lease; no process recorded yet
    RUNNING = "running"  # an agent process (or chat call) is working on it
    COMPLETED = "completed"  # done; final
    NEEDS_REVIEW = "needs_review"  # the work finished but a person or gate must approve it
    BLOCKED = "blocked"  # the agent or a person said it needs a human
    DEAD = "dead"  # attempts exhausted: the dead-letter set; final until requeued
    CANCELLED = "cancelled"  # stopped on purpose; final


FINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.DEAD, TaskState.CANCELLED})
OPEN_STATES = frozenset(TaskState) - FINAL_STATES
# States that hold a lease: a node is responsible for them until it finishes or its lease expires.
LEASED_STATES = frozenset({TaskState.CLAIMED, TaskState.RUNNING})
# States a person may cancel, block or otherwise stop.
STOPPABLE_STATES = OPEN_STATES


class Outcome(str, enum.Enum):
    SUCCEEDED = "succeeded"  # the work was done (exit 0, TASK_COMPLETE, `taskherd done`)
    FAILED = "failed"  # the agent reported failure or exited non-zero without a result
    RATE_LIMITED = "rate_limited"  # the runtime's provider refused for quota; no strike
    TIMED_OUT = "timed_out"  # exceeded the hard timeout and was killed
    STALLED = "stalled"  # alive but idle past idle_timeout, then killed
    CRASHED = "crashed"  # the process vanished (or its pid was reused) without a result
    CANCELLED = "cancelled"  # the task was cancelled while the run was going
    LOST = "lost"  # the lease expired and nobody could say what happened (rescued)
    BLOCKED = "blocked"  # the agent asked for a human (`taskherd block`)


# Failures of the work itself: each costs the task a strike (DESIGN §2).
STRIKE_OUTCOMES = frozenset({Outcome.FAILED, Outcome.TIMED_OUT, Outcome.STALLED, Outcome.CRASHED})


class Priority(enum.IntEnum):
    P0 = 0  # drop everything: claimed first, a wait is logged as a warning
    P1 = 1  # important
    P2 = 2  # normal (default)
    P3 = 3  # whenever there is room

    @classmethod
    def parse(cls, value: str | int) -> Priority:
        """Accept 0-3, "0"-"3" or "P0"-"P3"; raise ValueError naming what is accepted."""
        text = str(value).strip().upper().removeprefix("P")
        if text in {"0", "1", "2", "3"}:
            return cls(int(text))
        raise ValueError(f"priority {value!r} is not one of P0, P1, P2, P3 (or 0-3)")


ANY_ROLE = "any"
_STATES = {state.value: state for state in TaskState}
_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
_PRIORITIES = {int(priority): priority for priority in Priority}


def _from_columns(cls: type, data: dict[str, Any]) -> Any:
    """Build a frozen record straight from a row's columns, skipping the generated __init__.

    The columns are exactly the fields (the schema test keeps them so); a frozen dataclass's
    __init__ sets each of 25 fields through object.__setattr__, a third of a claim's time.
    """
    missing = cls.__dataclass_fields__.keys() - data.keys()
    for name in missing:  # fields newer than the row's query, e.g. optional report columns
        data[name] = cls.__dataclass_fields__[name].default
    record = object.__new__(cls)
    record.__dict__.update(data)
    return record  # a task for role `any` may be claimed by any role


@dataclass(frozen=True)
class NewTask:
    """What a caller supplies to enqueue a task; the store fills in the rest."""

    role: str
    title: str
    prompt: str = ""
    priority: Priority = Priority.P2
    pool: str | None = None
    dedup_key: str | None = None
    max_attempts: int = 3
    review: bool = False  # on success, go to needs_review instead of completed
    pending: bool = False  # start in `pending`, waiting for approval
    run_after: float | None = None  # unix seconds; None = now
    parent_id: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    id: int
    role: str
    title: str
    prompt: str
    priority: Priority
    state: TaskState
    pool: str | None
    dedup_key: str | None
    review: bool
    attempts: int  # strikes so far
    max_attempts: int
    rescues: int  # lease rescues (not strikes, but capped)
    rate_limits: int  # rate-limited runs (not strikes, but capped)
    run_after: float
    lease_node: str | None
    lease_expires_at: float | None
    last_error: str | None
    error_tail: str | None
    summary: str | None
    reason: str | None  # why blocked, cancelled, rejected or dead
    parent_id: int | None
    meta: dict[str, Any]
    created_at: float
    updated_at: float
    finished_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> Task:
        # On the claim and completion hot path: plain dict look-ups instead of enum calls,
        # and no JSON parse for the common empty meta.
        data = dict(row)
        data["priority"] = _PRIORITIES[data["priority"]]
        data["state"] = _STATES[data["state"]]
        data["review"] = bool(data["review"])
        meta = data["meta"]
        data["meta"] = json.loads(meta) if meta and meta != "{}" else {}
        return _from_columns(cls, data)

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["priority"] = f"P{int(self.priority)}"
        data["state"] = self.state.value
        return data


@dataclass(frozen=True)
class Run:
    id: int
    task_id: int
    attempt: int
    node: str
    role: str
    runtime: str | None
    pid: int | None
    pid_started_at: float | None  # process create time, so a reused pid is not mistaken for life
    log_path: str | None
    claimed_at: float
    spawned_at: float | None
    heartbeat_at: float | None
    progress: str | None
    ended_at: float | None
    exit_code: int | None
    outcome: Outcome | None
    summary: str | None
    error: str | None
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    turns: int | None
    session_id: str | None
    report: str | None = None  # the agent's own word: done, fail or block
    report_summary: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Run:
        data = dict(row)
        data["outcome"] = _OUTCOMES.get(data["outcome"])
        return _from_columns(cls, data)

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["outcome"] = self.outcome.value if self.outcome else None
        return data


@dataclass(frozen=True)
class RunResult:
    """What a runtime learnt about a finished run; the queue policy turns it into a transition."""

    outcome: Outcome
    exit_code: int | None = None
    summary: str | None = None
    error: str | None = None
    error_tail: str | None = None  # last lines of the log, kept on the task for the dead-letter set
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None
    session_id: str | None = None
    # When the runtime's provider said the limit resets (unix seconds), for rate_limited runs.
    retry_at: float | None = None


@dataclass(frozen=True)
class Cooldown:
    """A runtime paused by a rate limit until `until` (unix seconds)."""

    runtime: str
    until: float
    reason: str
    created_at: float
    span: float | None = None  # guessed length (no reset time in the text), for the next guess

    @classmethod
    def from_row(cls, row: Any) -> Cooldown:
        return cls(**dict(row))


@dataclass(frozen=True)
class Claim:
    """A claimed task and the run row created for this attempt."""

    task: Task
    run: Run
