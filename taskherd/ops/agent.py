"""What an agent may do, holding only its run's credential: say it is alive, report how its
run went (and what it cost), and add child tasks of its own task.

Every door an agent can use (the daemon's agent socket, the HTTP API) calls these, so the
rules live once: a credential acts on its own open run and on nothing else.

An agent's command tries a request again while no daemon answers, and the daemon that applied
the first try may have died before answering: an operation that makes something takes the
request's `RequestKey` (`once`) and answers a second try from what the first made
(`made_before`), making nothing twice. Heartbeats and reports set what they set, the same
however often they are applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from taskherd.model import NewTask, Run, Task
from taskherd.ops import BadInput, Queue
from taskherd.policy.taskspec import TaskSpecError, new_task_from
from taskherd.store import Enqueued, StoreError, TaskNotFound
from taskherd.store.errors import (
    ReportRefused,
    SpawnAllowance,
    SpawnLimitReached,
    max_spawn_reached,
)
from taskherd.store.requests import RequestKey

VERDICTS = ("done", "fail", "block")
MAX_NOTE = 10_000  # a progress note or summary is a line or a paragraph, not a log


class Unauthorized(Exception):
    """No open run holds this credential: unknown, mistyped, or its run has ended."""


def made_before(queue: Queue, once: RequestKey | None) -> dict[str, Any] | None:
    """What an earlier try of the request `once` made (None: nothing, or no key given)."""
    return None if once is None else queue.store.request_made(once)


def authenticate(queue: Queue, token: object) -> Run:
    if not isinstance(token, str) or not token:
        raise Unauthorized("no run credential given (TASKHERD_RUN_TOKEN is empty)")
    run = queue.store.run_of_credential(token)
    if run is None:
        raise Unauthorized("the run credential is not valid: unknown, or its run has ended")
    return run


def heartbeat(queue: Queue, run: Run, now: float, progress: str | None = None) -> Run:
    return queue.store.heartbeat(run.id, now, queue.config.daemon.lease,
                                 _note("progress", progress))


def report(queue: Queue, run: Run, now: float, verdict: str, summary: str | None = None, *,
           cost_usd: float | None = None, input_tokens: int | None = None,
           output_tokens: int | None = None) -> Run:
    """Record the agent's verdict; the run settles when the agent exits."""
    if verdict not in VERDICTS:
        raise BadInput(f"verdict {verdict!r} is not one of: {', '.join(VERDICTS)}")
    cost, tokens_in = _amount("cost_usd", cost_usd), _count("input_tokens", input_tokens)
    tokens_out = _count("output_tokens", output_tokens)
    summary = _note("summary", summary)
    # The first report stands (the store refuses another): the usage a refused one carried
    # is not recorded either.
    reported = queue.store.report(run.id, verdict, now, summary)
    if (cost, tokens_in, tokens_out) != (None, None, None):
        queue.store.record_reported_usage(run.id, cost_usd=cost, input_tokens=tokens_in,
                                          output_tokens=tokens_out)
    return reported


class SpawnRefused(StoreError):
    """A run may not add this task: it added max_spawn already, or the chain is too deep."""


def add_child_task(queue: Queue, run: Run, spec: Mapping[str, Any], now: float,
                   once: RequestKey | None = None) -> Enqueued:
    """Add a task whose parent is the run's task, checked as `task add` checks it, within the
    run's spawn limits (`check_spawn_limits`); a second try of `once` gets the first's task."""
    if (made := made_before(queue, once)) is not None:
        # Before the checks: the first try's task counts against max_spawn now.
        return Enqueued(queue.store.get_task(made["task"]), created=made["created"])
    new = child_task(queue, run.task_id, spec)
    check_spawn_limits(queue, run.task_id, run.claimed_at)
    try:
        return queue.store.enqueue(new, now, spawn_allowance(queue, run.task_id, run.claimed_at),
                                   once=once)
    except SpawnLimitReached as reached:  # a parallel addition took the last place
        raise SpawnRefused(str(reached)) from None


def check_spawn_limits(queue: Queue, task_id: int, since: float) -> None:
    """The limits on what a run adds below its task, since `since` (its claim), that keep a
    runaway agent (a planner in a loop) from flooding the queue: at most [monitor] max_spawn
    tasks and jobs a run, none deeper than [daemon] max_depth. The one rule for every way an
    agent adds work: a door's add_task, a spawn message's task or job."""
    parent = queue.store.get_task(task_id)
    max_depth = queue.config.daemon.max_depth
    if parent.depth + 1 > max_depth:
        raise SpawnRefused(f"refused: the task would be at depth {parent.depth + 1} of its "
                           f"chain, beyond max_depth {max_depth}")
    max_spawn = queue.config.monitor.max_spawn
    added = queue.store.children_since(task_id, since)
    if added >= max_spawn:
        raise SpawnRefused(max_spawn_reached(added, max_spawn))


def spawn_allowance(queue: Queue, task_id: int, since: float) -> SpawnAllowance:
    """max_spawn as the store checks it again in the transaction that adds (the check above
    answers early with the same words; this one holds when two additions race)."""
    return SpawnAllowance(task_id, since, queue.config.monitor.max_spawn)


def child_task(queue: Queue, parent_id: int, spec: object) -> NewTask:
    """`spec` (task fields) as a child of task `parent_id`, checked as `task add` checks
    it: the one check for every way an agent adds work (a door's add_task, a spawn
    message)."""
    if not isinstance(spec, Mapping):
        raise BadInput("a task must be an object of task fields")
    parent = spec.get("parent_id", parent_id)
    if parent != parent_id:
        raise BadInput(f"parent_id {parent!r}: an agent adds children of its own task "
                       f"({parent_id}) only")
    try:
        return new_task_from({**spec, "parent_id": parent_id}, queue.config)
    except TaskSpecError as error:
        raise BadInput(str(error)) from error


def task_context(queue: Queue, run: Run) -> dict[str, Any]:
    """The run's own task, and its parent's title, state and summary when it has one."""
    task = queue.store.get_task(run.task_id)
    parent = None
    if task.parent_id is not None:
        try:
            found = queue.store.get_task(task.parent_id)
            parent = {"id": found.id, "title": found.title, "state": found.state.value,
                      "summary": found.summary}
        except TaskNotFound:  # pruned meanwhile
            parent = None
    return {"task": task.to_dict(), "run_id": run.id, "parent": parent}


def review(queue: Queue, run: Run, now: float, verdict: str | None, reason: str | None = None,
           once: RequestKey | None = None) -> Task:
    """The reviewer's verdict on the task its own task reviews: approve (→ completed, then its
    chain) or reject (→ ready with `reason` in its next prompt, or blocked at max_reviews).
    The review run is reported done with the verdict as its summary. A second try of `once`
    moves nothing again: it reports, and answers with the reviewed task as it is."""
    if verdict not in ("approve", "reject"):
        raise BadInput(f"verdict {verdict!r} is not one of: approve, reject")
    reason = _note("reason", reason)
    if verdict == "reject" and not (reason and reason.strip()):
        raise BadInput("a rejection needs --reason: it is what the next attempt is told")
    from taskherd.policy.chains import review_of

    review_task = queue.store.get_task(run.task_id)
    reviewed = review_of(review_task)
    if reviewed is None:
        raise BadInput(f"task {review_task.id} is not a review: `taskherd {verdict}` is for a "
                       "reviewer's run (a person uses `taskherd task approve|reject ID`)")
    summary = (f"approved task {reviewed}" if verdict == "approve"
               else f"rejected task {reviewed}: {reason}")
    reported = queue.store.get_run(run.id)
    if reported.report is not None and (reported.report, reported.report_summary) != (
            "done", summary):
        # The verdict is this run's report: after another, it would move the reviewed task
        # on a run whose first word stands otherwise.
        raise ReportRefused(f"run {run.id} already reported {reported.report!r}: the first "
                            "report of a run stands (no verdict recorded)")
    if (made := made_before(queue, once)) is not None:
        moved = queue.store.get_task(made["task"])
    else:
        moved = queue.store.review_verdict(review_task.id, verdict, reason, now, once=once)
    # After the verdict, in a transaction of its own: a daemon that died between the two
    # left the report to the second try, which comes here again.
    queue.store.report(run.id, "done", now, summary)
    return moved


def _note(field: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{field} must be text, not {type(value).__name__}")
    if len(value) > MAX_NOTE:
        raise BadInput(f"{field} is {len(value)} characters long (at most {MAX_NOTE})")
    return value


def _amount(field: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise BadInput(f"{field} = {value!r} is not accepted: a number of dollars, 0 or more")
    return float(value)


def _count(field: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInput(f"{field} = {value!r} is not accepted: a whole number, 0 or more")
    return value
