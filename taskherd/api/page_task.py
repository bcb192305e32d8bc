"""The dashboard's task page: where the task is (node, pid, the supervisor's verdict and the
next threshold), its runs and strikes apart, each run's outcome, cost, tokens and duration,
its chain (parent, children, job), its gates with their logs, the messages to and from it,
and every action a person may take on it, each a form calling `taskherd.ops` as the CLI does.

Everything shown is escaped (`h`): titles, prompts, questions, gate output and messages are
written by agents and others.
"""

from __future__ import annotations

from typing import Any

from taskherd.api.pages import (
    View,
    _branch,
    h,
    list_href,
    span,
    state,
    table,
    task_id_in,
    when,
)
from taskherd.model import FINAL_STATES, Run, Task, TaskState
from taskherd.ops import board as board_ops
from taskherd.ops import logs as log_ops
from taskherd.ops import messages as message_ops
from taskherd.ops import runs as run_ops
from taskherd.ops import tasks
from taskherd.policy.costs import cost_text

MESSAGES_SHOWN = 50
GATE_LINES = 40
# The transitions a task in each state takes from a person (the store refuses the others).
MOVES = {TaskState.NEEDS_REVIEW: ["approve", "reject", "block"],
         TaskState.PENDING: ["approve", "block"], TaskState.READY: ["block"],
         TaskState.BLOCKED: ["unblock"], TaskState.DEAD: ["requeue"],
         TaskState.CANCELLED: ["requeue"]}
WITH_REASON = {"reject": "rejected on the dashboard", "block": "held on the dashboard",
               "cancel": "cancelled on the dashboard"}


def task(view: View) -> str:
    task_id = task_id_in(view.params["task_id"])
    data = tasks.task_with_runs(view.queue, task_id)
    current, runs = data["task"], data["runs"]
    open_run = next((run for run in reversed(runs) if run.ended_at is None), None)
    return (f'<h2 id="task-title">#{current.id} {h(current.title)}</h2>'
            + _actions(view, current, open_run) + _facts(view, current, data, open_run)
            + f'<h2>Prompt</h2><pre>{h(current.prompt)}</pre>'
            + _chain(view, current) + _runs(view, runs) + _gates(view, current.id)
            + _messages(view, current.id))


def _facts(view: View, current: Task, data: dict[str, Any], open_run: Run | None) -> str:
    rows = [["state", state(current.state.value)], ["role", h(current.role)],
            ["priority", f"P{int(current.priority)}"],
            ["runs", str(len(data["runs"]))],
            ["strikes", f"{current.attempts} of {current.max_attempts}"],
            ["rescues · rate limits", f"{current.rescues} · {current.rate_limits}"],
            ["created", when(view, current.created_at)],
            ["finished", when(view, current.finished_at)]]
    if open_run is not None:
        rows += [["node", h(open_run.node)], ["pid", h(open_run.pid or "not started")],
                 ["liveness", _liveness(view, open_run)]]
    rows += [["summary", h(current.summary)], ["reason", h(current.reason)],
             ["last error", f"<code>{h(current.last_error)}</code>"],
             ["cost", h(cost_text(data["cost_usd"], data["unpriced_runs"]))
              if data["cost_usd"] is not None or data["unpriced_runs"] else "-"],
             ["waits", h(board_ops.why_waiting(view.queue, current, view.now) or "-")]]
    return f'<div id="facts">{table(["field", "value"], rows)}</div>'


def _liveness(view: View, run: Run) -> str:
    verdict = run_ops.liveness(view.queue, run, view.now)
    if verdict is None:
        return "-"
    upcoming = (f' · {h(verdict["next"])} {when(view, verdict["next_at"])}'
                if verdict["next_at"] is not None else "")
    return f'<span id="liveness">{h(verdict["verdict"])}</span>{upcoming}'


def _actions(view: View, current: Task, open_run: Run | None) -> str:
    if not view.may_act:
        return ""
    moves = MOVES.get(current.state, []) + (
        ["cancel"] if current.state not in FINAL_STATES else [])
    forms = [_move_form(view, current.id, name) for name in moves]
    if current.state not in FINAL_STATES:
        forms.append(_priority_form(view, current))
    if open_run is not None and open_run.liveness == "waiting_input":
        forms.append(_answer_form(view, current.id, open_run))
    return f'<div class="actions" id="actions">{"".join(forms)}</div>'


def _hidden(view: View, back: str) -> str:
    return (f'<input type="hidden" name="csrf" value="{h(view.csrf)}">'
            f'<input type="hidden" name="back" value="{h(back)}">')


def _move_form(view: View, task_id: int, action: str) -> str:
    reason = (f'<input name="reason" id="{action}-reason" value="{h(WITH_REASON[action])}" '
              f'aria-label="why ({action})"> ' if action in WITH_REASON else "")
    css = "stop" if action in ("cancel", "reject", "block") else "go"
    return (f'<form class="inline" method="post" action="/ui/tasks/{task_id}/{action}">'
            f'{_hidden(view, f"/tasks/{task_id}")}{reason}'
            f'<button class="{css}" id="{action}-{task_id}">{action.capitalize()}</button>'
            f'</form> ')


def _priority_form(view: View, current: Task) -> str:
    options = "".join(f'<option value="{n}"{" selected" if n == int(current.priority) else ""}>'
                      f'P{n}</option>' for n in range(4))
    return (f'<form class="inline" method="post" action="/ui/tasks/{current.id}/priority">'
            f'{_hidden(view, f"/tasks/{current.id}")}<select name="priority" id="priority" '
            f'aria-label="priority">{options}</select> '
            f'<button id="priority-{current.id}">Set priority</button></form> ')


def _answer_form(view: View, task_id: int, run: Run) -> str:
    return (f'<form method="post" action="/ui/tasks/{task_id}/answer" id="answer">'
            f'{_hidden(view, f"/tasks/{task_id}")}'
            f'<p>Its agent asks: <code id="question">{h(run.liveness_note)}</code></p>'
            f'<input name="text" id="answer-text" aria-label="answer" size="40"> '
            f'<button class="go" id="answer-{task_id}">Answer</button></form>')


def _chain(view: View, current: Task) -> str:
    tree = tasks.task_tree(view.queue, current.id)
    job = current.meta.get("job")
    lines = []
    if current.parent_id:
        lines.append(f'parent <a href="/tasks/{current.parent_id}">#{current.parent_id}</a>')
    if job:
        lines.append(f'made by job <a href="{h(list_href(job=job))}" id="job">{h(job)}</a>')
    said = f'<p>{" · ".join(lines)}</p>' if lines else ""
    shown = (f'<div class="tree" id="chain">{_branch(tree, current.id)}</div>'
             if tree["children"] or current.parent_id else "")
    return f"<h2>Chain</h2>{said}{shown}" if said or shown else ""


def _runs(view: View, runs: list[Run]) -> str:
    rows = [[str(run.id), str(run.attempt), h(run.node), when(view, run.claimed_at),
             span((run.ended_at or view.now) - (run.spawned_at or run.claimed_at)),
             h(run.outcome.value if run.outcome else "running"), h(run.report),
             f"${run.cost_usd:.4f}" if run.cost_usd is not None else "unknown",
             _tokens(run), h(run.summary or run.error or run.progress)] for run in runs]
    return "<h2>Runs</h2>" + table(["run", "attempt", "node", "claimed", "took", "outcome",
                                    "report", "cost", "tokens in/out", "summary / error"],
                                   rows, "no run yet")


def _tokens(run: Run) -> str:
    if run.input_tokens is None and run.output_tokens is None:
        return "-"
    return f"{run.input_tokens or 0:,} / {run.output_tokens or 0:,}"


def _gates(view: View, task_id: int) -> str:
    checks = tasks.gates_of_task(view.queue, task_id)
    if not checks:
        return ""
    shown = []
    for check in checks:
        result = "running" if check.passed is None else ("passed" if check.passed else "FAILED")
        log = log_ops.gate_log_tail(view.queue, check.log_path, GATE_LINES)
        shown.append(f'<details class="gate"{" open" if check.passed is False else ""}>'
                     f'<summary>{h(check.name)} (run {check.run_id}): {result}'
                     f'{f", exit {check.exit_code}" if check.exit_code is not None else ""}'
                     f'</summary><pre>{h(log)}</pre></details>')
    return f'<h2>Gates</h2><div id="gates">{"".join(shown)}</div>'


def _messages(view: View, task_id: int) -> str:
    rows = [[when(view, message.created_at), h(message.sender), h(message.recipient),
             h(message.kind), f"<code>{h(message.body[:500])}</code>"]
            for message in message_ops.of_task(view.queue, task_id, view.now,
                                               limit=MESSAGES_SHOWN)]
    return ("<h2>Messages</h2>" + table(["sent", "from", "to", "kind", "text"], rows,
                                        "no message from it, none waiting for it")
            + '<p class="muted">Those it sent, and those waiting unread in its inbox.</p>')
