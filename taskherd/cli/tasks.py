"""`taskherd task …`: put tasks in the queue and move them through their life by hand."""

from __future__ import annotations

import json
from typing import Any

import click

from taskherd.agent import door as agent_door
from taskherd.cli.common import (
    BadInput,
    Refused,
    format_time,
    json_option,
    liveness_words,
    now,
    print_json,
    print_table,
    queue_for,
    say_if_unserved,
    since_moment,
)
from taskherd.cli.door import call_door
from taskherd.cli.log_options import check_log_options, log_options
from taskherd.model import Run, Task, TaskState
from taskherd.ops import tasks as task_ops
from taskherd.policy.durations import parse_duration

STATE_NAMES = list(task_ops.STATE_NAMES)


@click.group("task")
def task_group() -> None:
    """Add, inspect and move tasks."""


@task_group.command("add")
@click.argument("title")
@click.option("--role", "-r", required=True, help="Role that runs it ('any' for any role).")
@click.option("--prompt", "-p", help="The agent's instructions.")
@click.option("--prompt-file", type=click.File("rb"),
              help="Read the prompt from a file ('-': stdin).")
@click.option("--priority", "-P", default="P2", show_default=True, help="P0 (first) … P3.")
@click.option("--pool", help="A pool from [pools] the task needs a slot of.")
@click.option("--dedup-key", help="If an open task has this key, return it instead.")
@click.option("--max-attempts", type=int, help="Strikes before the task goes to dead.")
@click.option("--review/--no-review", default=None, help="Wait for approval after success.")
@click.option("--pending", is_flag=True, help="Wait for approval before running.")
@click.option("--after", "delay", help="Not before this delay has passed, e.g. '10m'.")
@click.option("--parent", "parent_id", type=int, help="The task that made this one.")
@click.option("--deliver-to", multiple=True, help="An alias told when it settles, e.g. @ops "
              "(repeat).")
@click.option("--on", "deliver_on", multiple=True,
              help="Which settles tell it: completed, dead, blocked, needs_review, cancelled "
                   "(repeat; default: all but cancelled).")
@click.option("--then", "then", multiple=True, metavar="JSON",
              help="A follow-up it creates when it settles, as a JSON object (role, title, "
                   "prompt, priority, pool, on, when, delay); repeatable.")
@json_option
@click.pass_context
def add_command(ctx: click.Context, title: str, prompt_file: Any, delay: str | None,
                then: tuple[str, ...], as_json: bool, **options: Any) -> None:
    """Add a task to the queue."""
    if then:
        options["chain"] = [_follow_up_json(text) for text in then]
    if options["prompt"] is not None and prompt_file is not None:
        raise BadInput("give --prompt or --prompt-file, not both")
    if prompt_file is not None:
        options["prompt"] = decoded(prompt_file.read(), "--prompt-file")
    started = now()
    if delay is not None:
        try:
            options["run_after"] = started + parse_duration(delay)
        except ValueError as error:
            raise BadInput(f"--after {delay!r}: {error}") from error
    fields = {key: value for key, value in options.items() if value is not None}
    deliver_to, deliver_on = fields.pop("deliver_to", ()), fields.pop("deliver_on", ())
    if deliver_to:
        fields["deliver_to"] = list(deliver_to)
    if deliver_on:
        fields["on"] = list(deliver_on)
    if agent_door.inside_run():  # an agent adds a child of its task, through its daemon
        result = call_door("add_child_task", {"task": {"title": title, **fields}})
        task, created = result["task"], result["created"]
    else:
        with queue_for(ctx) as queue:
            enqueued = task_ops.add_task(queue, {"title": title, **fields}, started)
            say_if_unserved(queue, [enqueued.task.role], started)
        task, created = enqueued.task.to_dict(), enqueued.created
    if as_json:
        print_json(task | {"created": created})
    elif created:
        click.echo(f"added task {task['id']} ({task['state']})")
    else:
        click.echo(f"task {task['id']} is already open with dedup key {task['dedup_key']!r}")


@task_group.command("import")
@click.argument("source", type=click.File("rb"))
@json_option
@click.pass_context
def import_command(ctx: click.Context, source: Any, as_json: bool) -> None:
    """Add tasks from JSON Lines (one object per line; '-' reads stdin). All or nothing."""
    lines = [decoded(raw, f"line {number}") for number, raw in enumerate(source, start=1)]
    with queue_for(ctx) as queue:
        result = task_ops.import_json_lines(queue, lines, started := now())
        say_if_unserved(queue, result["roles"], started)
    created = result["created"]
    if as_json:
        print_json({"read": result["read"], "created": created})
    else:
        duplicates = result["read"] - created
        note = f" ({duplicates} already open by dedup key)" if duplicates else ""
        click.echo(f"imported {created} tasks{note}")


@task_group.command("list")
@click.option("--state", "-s", type=click.Choice(STATE_NAMES),
              help="Only tasks in this state (completed, dead, cancelled: the most recently "
                   "finished first).")
@click.option("--role", "-r", help="Only tasks of this role.")
@click.option("--history", is_flag=True,
              help="Finished tasks, newest first, with when they finished and how.")
@click.option("--since", help="With --history: finished within this long, e.g. '1d'.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=100, show_default=True)
@json_option
@click.pass_context
def list_command(ctx: click.Context, state: str | None, role: str | None, history: bool,
                 since: str | None, limit: int, as_json: bool) -> None:
    """List tasks: open ones first, by priority, then FIFO; or --history, newest first."""
    if since is not None and not history:
        raise BadInput("--since reads the history: give it with --history")
    if history and state is not None:
        raise BadInput("--history lists finished tasks: give --state without it")
    started = now()
    with queue_for(ctx, writes=False) as queue:
        if history:
            tasks = task_ops.task_history(queue, since=since_moment(since, started), role=role,
                                          limit=limit)
        else:
            tasks = task_ops.list_tasks(queue, state=state, role=role, limit=limit)
    if as_json:
        print_json([task.to_dict() for task in tasks])
    elif history:
        print_table(
            ["id", "finished", "state", "role", "title", "summary / last error"],
            [[t.id, format_time(t.finished_at), t.state.value, t.role, _clip(t.title, 40),
              _clip(t.summary or t.last_error or t.reason or "", 60)] for t in tasks])
    else:
        print_table(
            ["id", "pri", "state", "role", "strikes", "title"],
            [[t.id, f"P{int(t.priority)}", t.state.value, t.role,
              f"{t.attempts} of {t.max_attempts}", _clip(t.title, 60)] for t in tasks],
        )


@task_group.command("show")
@click.argument("task_id", type=int)
@json_option
@click.pass_context
def show_command(ctx: click.Context, task_id: int, as_json: bool) -> None:
    """Show one task with its runs."""
    from taskherd.ops import board as board_ops
    from taskherd.ops import runs as run_ops

    at = now()
    with queue_for(ctx, writes=False) as queue:
        task = task_ops.get_task(queue, task_id)
        runs = task_ops.runs_of_task(queue, task_id)
        liveness = run_ops.open_liveness(queue, runs, at)
        gates = task_ops.gates_of_task(queue, task_id)
        waits_for = board_ops.why_waiting(queue, task, at)
    if as_json:
        print_json(task.to_dict() | {"runs": [run.to_dict() | {"liveness": liveness.get(run.id)}
                                              for run in runs],
                                     "gates": [gate.to_dict() for gate in gates],
                                     "waits_for": waits_for})
        return
    _print_task(task, runs)
    if waits_for is not None:
        click.echo(f"{'waits':>10}: {waits_for}")
    for run in runs:
        if run.id in liveness:
            click.echo(f"{'liveness':>10}: {liveness_words(liveness[run.id])}")
    if gates:
        click.echo("")
        print_table(
            ["gate", "run", "started", "result", "exit", "log"],
            [[g.name, g.run_id, format_time(g.started_at),
              "running" if g.passed is None else ("passed" if g.passed else "FAILED"),
              g.exit_code, g.log_path] for g in gates])
    if runs:
        click.echo("")
        print_table(
            ["run", "node", "pid", "started", "ended", "outcome", "exit", "cost", "summary"],
            [[r.id, r.node, r.pid, format_time(r.claimed_at), format_time(r.ended_at),
              r.outcome.value if r.outcome else liveness[r.id]["verdict"], r.exit_code,
              f"${r.cost_usd:.4f}" if r.cost_usd is not None else None,
              _clip(r.summary or r.error or "", 50)] for r in runs],
        )


@task_group.command("answer")
@click.argument("task_id", type=int)
@click.argument("text")
@json_option
@click.pass_context
def answer_command(ctx: click.Context, task_id: int, text: str, as_json: bool) -> None:
    """Type TEXT (and Enter) into the agent of a running task that waits at a question (its
    role sets on_input = "wait"). An answer that starts with '-' goes after '--'."""
    with queue_for(ctx) as queue:
        run = task_ops.answer(queue, task_id, text, now())
    if as_json:
        print_json({"task_id": task_id, "run_id": run.id, "answered": True})
    else:
        click.echo(f"task {task_id}: answered its agent (run {run.id})")


@task_group.command("priority")
@click.argument("task_id", type=int)
@click.argument("priority", type=click.IntRange(0, 3))
@json_option
@click.pass_context
def priority_command(ctx: click.Context, task_id: int, priority: int, as_json: bool) -> None:
    """Give an open task PRIORITY (0 is the most urgent, 3 the least): a ready task takes
    its place in the claim order at once."""
    with queue_for(ctx) as queue:
        task = task_ops.set_priority(queue, task_id, priority, now())
    if as_json:
        print_json(task.to_dict())
    else:
        click.echo(f"task {task.id} is now P{int(task.priority)} ({task.state.value})")


@task_group.command("log")
@click.argument("task_id", type=int)
@click.option("--run", "run_id", type=int, help="This run of the task rather than its latest.")
@log_options
@click.pass_context
def log_command(ctx: click.Context, task_id: int, run_id: int | None, lines: int | None,
                follow: bool, raw: bool, as_json: bool) -> None:
    """Print what the agent of a task's latest run wrote (its log), or follow it."""
    check_log_options(lines, follow, as_json)
    from taskherd.cli.logs import show_log
    from taskherd.ops import runs as run_ops

    with queue_for(ctx, writes=False) as queue:
        task = task_ops.get_task(queue, task_id)
        runs = task_ops.runs_of_task(queue, task_id)
        if run_id is not None:
            chosen = [run for run in runs if run.id == run_id]
            if not chosen:
                owner = run_ops.get_run(queue, run_id).task_id
                raise BadInput(
                    f"--run {run_id}: it is a run of task {owner}, not of task {task_id}")
            run = chosen[0]
        elif runs:
            run = runs[-1]
        else:
            raise Refused(f"task {task_id} has not run yet (it is {task.state.value})")
        show_log(queue, run, lines=lines, follow=follow, as_json=as_json, raw=raw)


def _follow_up_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise BadInput(f"--then {text!r}: not a JSON object ({error.msg}); e.g. "
                       '\'{"role": "qa", "title": "Review {parent_title}"}\'') from None


@task_group.command("tree")
@click.argument("task_id", type=int)
@json_option
@click.pass_context
def tree_command(ctx: click.Context, task_id: int, as_json: bool) -> None:
    """Show the chain a task belongs to, from its root: states and outcomes."""
    with queue_for(ctx, writes=False) as queue:
        root = task_ops.tree(queue, task_id)
    if as_json:
        print_json(root)
        return
    for line in tree_lines(root, mark=task_id):
        click.echo(line)


def tree_lines(node: dict[str, Any], mark: int | None = None, prefix: str = "",
               last: bool = True, top: bool = True) -> list[str]:
    """A chain drawn as a tree, one task a line: id, role, state (outcome), title."""
    outcome = f" ({node['outcome']})" if node["outcome"] and node["state"] != "completed" else ""
    review = f" reviews {node['review_of']}" if node.get("review_of") else ""
    here = " ◀" if node["id"] == mark else ""
    branch = "" if top else ("└─ " if last else "├─ ")
    marks = [f"{n} {word}{'s' if n > 1 else ''}" for n, word in
             ((node.get("strikes", 0), "strike"), (node.get("rejections", 0), "rejection")) if n]
    history = f" [{', '.join(marks)}]" if marks else ""
    line = (f"{prefix}{branch}{node['id']} {node['role']}{review} {node['state']}{outcome}"
            f"{history}: {_clip(node['title'], 60)}{here}")
    lines = [line]
    if node["reason"] and node["state"] in ("blocked", "dead", "cancelled", "completed"):
        pad = prefix + ("" if top else ("   " if last else "│  "))
        lines.append(f"{pad}   ↳ {_clip(node['reason'], 80)}")
    children = node["children"]
    inner = prefix + ("" if top else ("   " if last else "│  "))
    for index, child in enumerate(children):
        lines += tree_lines(child, mark, inner, index == len(children) - 1, top=False)
    return lines


def _print_task(task: Task, runs: list[Run]) -> None:
    # Runs and strikes are different counts: a rate limit or a rescue is a run, not a strike.
    progress = next((run.progress for run in reversed(runs)
                     if run.ended_at is None and run.progress), None)
    lines = [
        ("task", task.id), ("title", task.title), ("role", task.role),
        ("state", task.state.value), ("priority", f"P{int(task.priority)}"),
        ("runs", len(runs)), ("strikes", f"{task.attempts} of {task.max_attempts}"),
        ("progress", progress), ("pool", task.pool),
        ("dedup key", task.dedup_key), ("lease", task.lease_node), ("reason", task.reason),
        ("parent", task.parent_id), ("chain", f"root {task.root_id}, depth {task.depth}"
                                     if task.root_id else None),
        ("rejections", task.rejections or None),
        ("summary", task.summary), ("last error", task.last_error),
        ("created", format_time(task.created_at)),
        ("finished", format_time(task.finished_at) if task.finished_at else None),
    ]
    for label, value in lines:
        if value is not None:
            click.echo(f"{label:>10}: {value}")
    if task.prompt:
        click.echo(f"\n{task.prompt}")
    if task.error_tail:
        click.echo(f"\nerror log tail:\n{task.error_tail}")


def person_transition(ctx: click.Context, name: str, task_id: int, reason: str | None,
                      as_json: bool, with_reason: bool = True) -> None:
    """One person's transition of a task, printed the same way by every command."""
    with queue_for(ctx) as queue:
        operation = task_ops.TRANSITIONS[name]
        args = (task_id, now(), reason) if with_reason else (task_id, now())
        task = operation(queue, *args)
        if task.state is TaskState.READY:
            say_if_unserved(queue, [task.role], args[1])
    if as_json:
        print_json(task.to_dict())
    else:
        click.echo(f"task {task.id} is now {task.state.value}")


@task_group.command("cancel")
@click.argument("task_id", type=int)
@click.option("--reason", help="Why; kept on the task.")
@click.option("--only", is_flag=True, help="Cancel this task only, not the open tasks its "
                                           "chain created below it.")
@json_option
@click.pass_context
def cancel_command(ctx: click.Context, task_id: int, reason: str | None, only: bool,
                   as_json: bool) -> None:
    """Cancel a task and the open tasks its chain created below it."""
    if only:
        person_transition(ctx, "cancel", task_id, reason, as_json)
        return
    with queue_for(ctx) as queue:
        cancelled = task_ops.cancel_tree(queue, task_id, now(), reason)
    if as_json:
        print_json([task.to_dict() for task in cancelled])
        return
    for task in cancelled:
        below = "" if task.id == task_id else f" (below task {task_id})"
        click.echo(f"task {task.id} is now {task.state.value}{below}")


def _transition(name: str, doc: str, with_reason: bool) -> None:
    """Register `task NAME ID [--reason]`: one person's transition, printed the same way."""

    def command(ctx: click.Context, task_id: int, as_json: bool, reason: str | None = None) -> None:
        person_transition(ctx, name, task_id, reason, as_json, with_reason)

    command.__doc__ = doc
    command = json_option(command)
    if with_reason:
        command = click.option("--reason", help="Why; kept on the task.")(command)
    command = click.argument("task_id", type=int)(command)
    task_group.command(name)(click.pass_context(command))


_transition("approve", "Approve a pending task (→ ready) or a reviewed one (→ completed).", False)
_transition("reject", "Reject a task under review: it goes back to ready.", with_reason=True)
_transition("block", "Hold a task for a human (pending, ready or under review).", True)
_transition("unblock", "Release a blocked task back to ready.", with_reason=False)
_transition("requeue", "Revive a dead or cancelled task with a fresh retry budget.", False)


def decoded(data: bytes, where: str) -> str:
    """Bytes read from a file or stdin as text; bytes that are not UTF-8 are bad input."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadInput(f"{where}: not valid UTF-8 (byte {data[error.start]:#04x} at offset "
                       f"{error.start}); save it as UTF-8") from None


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
