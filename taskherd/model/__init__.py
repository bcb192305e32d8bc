"""The vocabulary of taskherd as types: task states, run outcomes, priorities, and the records."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import field
from json.encoder import encode_basestring_ascii as _json_text
from typing import Any

from taskherd.model.record import Record


class TaskState(str, enum.Enum):
    PENDING = "pending"  # waits for approval (planner-created, or added with review gate)
    READY = "ready"  # claimable once run_after has passed
    CLAIMED = "claimed"  # a node holds the lease; no process recorded yet
    RUNNING = "running"  # an agent process (or chat call) is working on it
    COMPLETED = "completed"  # done; final
    NEEDS_REVIEW = "needs_review"  # the work finished but a person or gate must approve it
    # Done, its worktree branch waiting for (or in) its merge into the base: the worktree
    # service merges it after the settle, off the loop, then completes or blocks it.
    MERGING = "merging"
    BLOCKED = "blocked"  # the agent or a person said it needs a human
    DEAD = "dead"  # attempts exhausted: the dead-letter set; final until requeued
    CANCELLED = "cancelled"  # stopped on purpose; final


FINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.DEAD, TaskState.CANCELLED})
OPEN_STATES = frozenset(TaskState) - FINAL_STATES
# States that hold a lease: a node is responsible for them until it finishes or its lease expires.
LEASED_STATES = frozenset({TaskState.CLAIMED, TaskState.RUNNING})


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
    # Alive and idle at a question or a permission prompt past input_timeout: the task waits
    # in blocked with the question as its reason. No strike: a headless agent could not ask.
    NEEDS_INPUT = "needs_input"
    LOOPING = "looping"  # output repeating without progress (loop_repeats in loop_window)


# Failures of the work itself: each costs the task a strike (docs/states.md).
STRIKE_OUTCOMES = frozenset({Outcome.FAILED, Outcome.TIMED_OUT, Outcome.STALLED, Outcome.CRASHED,
                             Outcome.LOOPING})
# Outcomes that send the task to `blocked`, waiting for a person: no strike, no retry.
BLOCKING_OUTCOMES = frozenset({Outcome.BLOCKED, Outcome.NEEDS_INPUT})
# Outcomes the supervisor decides while the agent is still alive, and ends it for.
KILL_OUTCOMES = frozenset({Outcome.TIMED_OUT, Outcome.STALLED, Outcome.NEEDS_INPUT,
                           Outcome.LOOPING, Outcome.RATE_LIMITED, Outcome.CANCELLED})


class Fault(enum.StrEnum):
    """A failure that is the machine's, not the agent's (`taskherd/policy/faults.py` says which):
    no strike and no attempt; the node pauses, with the reason shown, until a probe passes."""

    DISK = "disk"  # the disk is full, over quota or read-only (ENOSPC, EDQUOT, EROFS)
    # A chat runtime's endpoint refused the connection, cut its answer or said it is down
    # (502/503/504…): its runtime pauses, not the node, until a probe request gets through.
    ENDPOINT = "endpoint"


class Liveness(enum.StrEnum):
    """The supervisor's verdict on a running agent, kept on its run while it runs."""

    ACTIVE = "active"  # output, a heartbeat or CPU time within the last QUIET_AFTER seconds
    QUIET = "quiet"  # no sign of work since `liveness_since`; stalled at idle_timeout
    WAITING_INPUT = "waiting_input"  # idle at a question (`liveness_note`); see on_input
    LOOPING = "looping"  # repeating itself; being ended as `looping`


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


class Verdict(enum.StrEnum):
    """What an agent reported of its run before exiting (`taskherd done|fail|block`)."""

    DONE = "done"  # the work is done: the run succeeds when the agent exits
    FAIL = "fail"  # the work failed: a strike, as a non-zero exit would be
    BLOCK = "block"  # the agent needs a human: the task waits in blocked


class FireStatus(enum.StrEnum):
    """Where a job's fire stands. `open` and `queued` are not final; the rest are."""

    OPEN = "open"  # its task exists and has not finished
    QUEUED = "queued"  # overlap = queue held it; released when the job's open task ends
    OK = "ok"  # its task completed
    ERROR = "error"  # its task died (attempts exhausted) or could not be made
    TIMEOUT = "timeout"  # its task died and its last run timed out
    SKIPPED = "skipped"  # no task: overlap, a missed time, backoff or an open duplicate
    CANCELLED = "cancelled"  # its task was cancelled


FINAL_FIRE_STATUSES = frozenset(FireStatus) - {FireStatus.OPEN, FireStatus.QUEUED}


class OverlapPolicy(enum.StrEnum):
    """What to do when a job fires while the task of its previous fire is unfinished."""

    SKIP = "skip"  # default: don't create a task; two agents on one job's work collide
    ALLOW = "allow"  # create it anyway; the runs may overlap
    QUEUE = "queue"  # create it, held until the previous task finishes


ANY_ROLE = "any"
_STATES = {state.value: state for state in TaskState}
_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
_PRIORITIES = {int(priority): priority for priority in Priority}


def row_fields(row: Any) -> dict[str, Any]:
    """A database row as a new dict of its columns.

    `dict()` of an sqlite3.Row looks each column up by name, a scan of the names per column
    (quadratic in a 29-column row); zipping the names with the values reads each once.
    PostgreSQL's rows are dicts already.
    """
    if isinstance(row, dict):
        return dict(row)
    return dict(zip(row.keys(), row, strict=True))


def _from_columns(cls: Any, data: dict[str, Any]) -> Any:
    """Build a frozen record straight from a row's columns, skipping the generated __init__.

    The columns are exactly the fields (the schema test keeps them so); a frozen dataclass's
    __init__ sets each of 25 fields through object.__setattr__, a third of a claim's time.
    """
    fields = cls.__dataclass_fields__
    if len(data) != len(fields):  # a row of every field: no set of names compared (2.5 µs)
        for name in fields.keys() - data.keys():  # fields newer than the row's query, e.g.
            data[name] = fields[name].default   # optional report columns
    record = object.__new__(cls)
    record.__dict__.update(data)
    return record  # a task for role `any` may be claimed by any role


class NewTask(Record):
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
    # Follow-ups of its own (chains.FollowUp), created when it settles; the role's default
    # chain applies besides, whatever this says.
    chain: tuple[Any, ...] = ()


class Task(Record):
    """A task as the store holds it: what to do, where it stands, and its history's counts."""

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
    root_id: int | None = None  # the first task of its chain; None for a root
    depth: int = 0  # 0 for a root, its parent's + 1 for a child
    chain: str | None = None  # its own follow-ups, as JSON (chains.decode_chain)
    rejections: int = 0  # reviewers' rejections so far

    @classmethod
    def from_row(cls, row: Any) -> Task:
        # On the claim and completion hot path: plain dict look-ups instead of enum calls,
        # and no JSON parse for the common empty meta.
        data = row_fields(row)
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
        data["chain"] = json.loads(self.chain) if self.chain else []
        return data


class Run(Record):
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
    liveness: str | None = None  # a Liveness value while the run is open (None: not judged yet)
    liveness_since: float | None = None  # when that verdict began (quiet: the last activity)
    liveness_note: str | None = None  # the question an agent waits at, or the repeated block
    pool: str | None = None  # the role's pool when claimed: the run holds a place in it
    # The sha256 of the secret of the run's credential (`<id>.<secret>`), written by its
    # claim; kept out of what the run is shown as (to_dict, repr): the store compares it.
    credential_sha256: str | None = field(default=None, repr=False)

    @classmethod
    def from_row(cls, row: Any) -> Run:
        data = row_fields(row)
        data["outcome"] = _OUTCOMES.get(data["outcome"])
        return _from_columns(cls, data)

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["outcome"] = self.outcome.value if self.outcome else None
        del data["credential_sha256"]
        return data


class RunResult(Record):
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
    # The last lines the agent wrote, whatever the outcome: a chain's `when` condition and a
    # reviewer's APPROVED / REJECTED marker are read from it. Not stored.
    output_tail: str | None = None
    # The environment's fault that ended the run, if it was not the agent's (faults.py): the
    # task goes back to ready at once, no strike, no counter. Not stored: the error says it.
    fault: Fault | None = None


class GateCheck(Record):
    """One quality gate a role ran on a run whose agent reported success."""

    id: int
    run_id: int
    name: str
    log_path: str | None
    started_at: float
    ended_at: float | None
    exit_code: int | None
    passed: bool | None  # None while it runs
    error: str | None
    pid: int | None = None  # its process (the shim's pid), found again after a restart
    pid_started_at: float | None = None  # that process's start time: guards pid reuse

    @classmethod
    def from_row(cls, row: Any) -> GateCheck:
        data = row_fields(row)
        data["passed"] = None if data["passed"] is None else bool(data["passed"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Cooldown(Record):
    """A runtime paused by a rate limit, or by its endpoint being down, until `until` (unix
    seconds)."""

    runtime: str
    until: float
    reason: str
    created_at: float
    span: float | None = None  # guessed length (no reset time in the text), for the next guess
    probe_node: str | None = None  # the node that took the probe once `until` passed
    probe_run_id: int | None = None  # the probe's run, once claimed
    probe_started_at: float | None = None
    # Since when its endpoint has been down (the first call that found it so), for an outage;
    # None for a rate limit. Kept while probes find it still down.
    down_since: float | None = None

    @classmethod
    def from_row(cls, row: Any) -> Cooldown:
        return cls(**row_fields(row))

    def active(self, now: float) -> bool:
        """The runtime is paused: before `until`, nothing of it starts."""
        return self.until > now

    def probing(self, now: float) -> bool:
        """`until` has passed but no probe has shown the limit lifted yet: one run may go."""
        return self.until <= now


class MessageKind(enum.StrEnum):
    """What a message is for; agents and people read them alike, `spawn` is acted on."""

    TEXT = "text"  # a note from one agent or person to another
    TASK = "task"  # a request to do something (a person's or an agent's)
    RESULT = "result"  # the answer to a request, e.g. the id a spawn request created
    STATUS = "status"  # where some work stands
    SYSTEM = "system"  # from taskherd itself
    SPAWN = "spawn"  # a task spec to create as a child of the sender's task


MESSAGE_KINDS = tuple(kind.value for kind in MessageKind)
MAX_MESSAGES_LISTED = 1000  # one answer of an inbox, outbox or thread at most


class MessagePriority(enum.IntEnum):
    NORMAL = 0
    HIGH = 1
    URGENT = 2  # read first; may wake a task of a role that sets wake_on_urgent


EVERYONE = "@all"  # a recipient: every role (one message each)
PERSON = "@person"  # a sender: someone at the command line, not an agent
SYSTEM_SENDER = "@taskherd"  # a sender: taskherd itself (the answer to a spawn request)
TASK_ADDRESS = "task:"  # a recipient or sender that is one task: 'task:42'


class Message(Record):
    id: int
    sender: str
    sender_role: str | None
    sender_run_id: int | None
    recipient: str
    kind: str
    priority: int
    body: str
    reply_to: int | None
    thread_id: int | None  # the first message of its thread; None: this one is
    created_at: float
    delivered_at: float | None
    delivered_run_id: int | None
    read_at: float | None
    expires_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> Message:
        return _from_columns(cls, row_fields(row))

    @property
    def thread(self) -> int:
        return self.thread_id if self.thread_id is not None else self.id

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class InboxLimit(Record):
    """How much of its inbox a starting run receives in its prompt; the rest waits."""

    messages: int = 20
    bytes: int = 16_000


class Claim(Record):
    """A claimed task, the run row created for this attempt, and the messages delivered to
    the run with it (they go into its prompt)."""

    task: Task
    run: Run
    inbox: tuple[Message, ...] = ()
    # The run's credential when the claim recorded it (`<run_id>.<ClaimRequest.credential>`);
    # None: the launch issues one.
    credential: str | None = None


class EventKind(str, enum.Enum):
    """What a committed store transition tells its listeners (`Store.listen`)."""

    TASK_ADDED = "task_added"  # a task entered the queue (task_id None: a batch of them)
    TASK_CHANGED = "task_changed"  # a task moved to `state`
    RUN_STARTED = "run_started"  # a node claimed a task for a run, or its agent started
    RUN_ENDED = "run_ended"  # a run ended (its task_changed follows with the task's new state)
    JOB_FIRED = "job_fired"  # a job's fire was recorded (a task may have been added with it)
    JOB_CHANGED = "job_changed"  # a job was added, changed, enabled, disabled or asked to run now
    COOLDOWN_SET = "cooldown_set"  # a runtime was paused by a rate limit
    COOLDOWN_CLEARED = "cooldown_cleared"  # a runtime's pause was lifted
    INPUT_NEEDED = "input_needed"  # an agent waits at a question (the run's liveness_note)
    DELIVERY_QUEUED = "delivery_queued"  # a settle wrote outbox rows for delivery targets
    BUDGET_PAUSED = "budget_paused"  # a budget (`role`: a role's, or "fleet") paused spawns
    BUDGET_RESUMED = "budget_resumed"  # that budget has room again: spawns resume
    NODE_PAUSED = "node_paused"  # a node starts nothing new (its disk): `nodes` says why
    NODE_RESUMED = "node_resumed"  # that node starts runs again


_EVENT_KINDS = {kind.value: kind for kind in EventKind}
_KIND_PREFIX = b'{"kind":"'


class Event(Record):
    """One committed change, as listeners receive it: small, and never more than a hint.

    A listener that needs the whole task reads it from the store; an event may be missed
    (a listener that was not running, a lost connection), so nothing must depend on
    receiving every one.
    """

    kind: EventKind
    at: float  # the transition's `now`
    task_id: int | None = None
    run_id: int | None = None
    state: TaskState | None = None
    role: str | None = None
    job: str | None = None
    runtime: str | None = None

    def to_json(self) -> str:
        """The event as compact JSON, written as json.dumps writes it, the kind first, always
        (`kind_of` reads it without decoding the rest). Written by hand: every commit that
        someone listens to writes its events (json.dumps took 4.4 µs an event)."""
        parts = ['{"kind":"', self.kind.value, '"']
        for name, value in self.__dict__.items():
            if value is None or name == "kind":
                continue
            if name == "state":
                value = value.value
            parts.append(f',"{name}":')
            kind = type(value)
            if kind is str:
                parts.append(_json_text(value))
            elif kind is int or (kind is float and math.isfinite(value)):
                parts.append(repr(value))
            else:  # anything else (NaN, a subclass) as the standard library writes it
                parts.append(json.dumps(value))
        parts.append("}")
        return "".join(parts)

    @staticmethod
    def kind_of(line: bytes) -> str | None:
        """The kind of an event `to_json` wrote, read from its start (a listener passes over
        the kinds nobody asked for without decoding them); None for a line not so written."""
        if not line.startswith(_KIND_PREFIX):
            return None
        kind, quote, _ = line[len(_KIND_PREFIX):].partition(b'"')
        return kind.decode("ascii", "replace") if quote else None

    @classmethod
    def from_json(cls, text: str | bytes) -> Event:
        fields = json.loads(text)
        fields["kind"] = _EVENT_KINDS[fields["kind"]]
        if fields.get("state") is not None:
            fields["state"] = _STATES[fields["state"]]
        return cls(**fields)


class Finished(Record):
    """What `finish_run` did: the run is always recorded; the task moves only if it was leased."""

    run: Run
    task: Task
    moved: bool
