"""REST v1: each route parses what HTTP gave it and calls one operation of `taskherd.ops`.

No rule lives here: validation, transitions and grants are the operations' (a rule written
in a door is missing at the others).
"""

from __future__ import annotations

from typing import Any

from taskherd.api.app import TEXT, UNIX_SECONDS, ApiError, Call, choice, integer, path_int, route
from taskherd.model import TaskState
from taskherd.ops import BadInput, board, tasks
from taskherd.ops import charts as chart_ops
from taskherd.ops import cooldowns as cooldown_ops
from taskherd.ops import jobs as job_ops
from taskherd.ops import logs as log_ops
from taskherd.ops import runs as run_ops
from taskherd.ops import tokens as token_ops
from taskherd.ops.tokens import ACT, ADD, MANAGE, READ

MAX_TAIL_LINES = 10_000

# -- tasks ------------------------------------------------------------------------------


@route("GET", "/v1/tasks", READ, "Tasks, newest first, a page at a time", "TaskPage",
       query={"state": choice(state.value for state in TaskState), "role": TEXT,
              "limit": integer(1, tasks.MAX_PAGE, 100), "cursor": integer(1, 2**62)})
def list_tasks(call: Call) -> Any:
    return tasks.page_tasks(call.queue, state=call.optional_choice_query("state"),
                            role=call.query.get("role") or None,
                            cursor=call.optional_int_query("cursor"), limit=call.int_query("limit"))


@route("POST", "/v1/tasks", ADD, "Add a task (an open task with its dedup_key is returned)",
       "Added", status=201, body="NewTask")
def add_task(call: Call) -> Any:
    enqueued = tasks.add_task(call.queue, call.body_object(), call.now, allowed_roles(call))
    return {"task": enqueued.task, "created": enqueued.created}


@route("POST", "/v1/tasks/import", ADD, "Add many tasks, all or nothing", "Imported",
       status=201, body="TaskImport")
def import_tasks(call: Call) -> Any:
    if isinstance(call.body, str):  # application/x-ndjson: one task a line
        lines = call.body.splitlines()
        result = tasks.import_json_lines(call.queue, lines, call.now, allowed_roles(call))
    else:
        body = call.body_object()
        unknown = sorted(set(body) - {"tasks"})
        if unknown:
            raise ApiError(422, f"unknown field {unknown[0]!r} (accepted: tasks)", unknown[0])
        items = body.get("tasks")
        if not isinstance(items, list):
            raise ApiError(422, "tasks: expected a list of task objects", "tasks")
        result = tasks.import_tasks(call.queue, items, call.now, allowed_roles(call))
    return result


def allowed_roles(call: Call) -> tuple[str, ...] | None:
    return call.caller.token.roles if call.caller.token is not None else None


@route("GET", "/v1/tasks/{task_id}", READ, "A task with its runs and their cost", "TaskWithRuns")
def get_task(call: Call) -> Any:
    return tasks.task_with_runs(call.queue, call.task_id())


def _transition(name: str) -> None:
    def handler(call: Call) -> Any:
        body = call.body if call.body is not None else {}
        if not isinstance(body, dict):
            raise ApiError(422, "the body must be a JSON object (or empty)", "body")
        unknown = sorted(set(body) - {"reason"})
        if unknown:
            raise ApiError(422, f"unknown field {unknown[0]!r} (accepted: reason)", unknown[0])
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise ApiError(422, f"reason = {reason!r}: expected text", "reason")
        action = tasks.TRANSITIONS[name]
        args = (reason,) if name in ("cancel", "reject", "block") else ()
        return action(call.queue, call.task_id(), call.now, *args)

    handler.__name__ = f"{name}_task"
    route("POST", f"/v1/tasks/{{task_id}}/{name}", ACT, f"{name.capitalize()} a task", "Task",
          body="Reason")(handler)


for _name in tasks.TRANSITIONS:
    _transition(_name)


@route("POST", "/v1/tasks/{task_id}/priority", ACT, "Give an open task another priority (0 is "
       "the most urgent)", "Task", body="PriorityChange")
def set_priority(call: Call) -> Any:
    body = call.body
    if not isinstance(body, dict):
        raise ApiError(422, "the body must be a JSON object with priority", "body")
    unknown = sorted(set(body) - {"priority"})
    if unknown:
        raise ApiError(422, f"unknown field {unknown[0]!r} (accepted: priority)", unknown[0])
    if "priority" not in body:
        raise ApiError(422, "priority is required: 0, 1, 2 or 3", "priority")
    return tasks.set_priority(call.queue, call.task_id(), body["priority"], call.now)


# -- runs -------------------------------------------------------------------------------


@route("GET", "/v1/runs", READ, "Runs, newest first", "RunList",
       query={"role": TEXT, "since": UNIX_SECONDS, "limit": integer(1, 1000, 100)})
def list_runs(call: Call) -> Any:
    return run_ops.list_runs(call.queue, role=call.query.get("role") or None,
                             since=call.float_query("since"), limit=call.int_query("limit"))


@route("GET", "/v1/runs/{run_id}", READ, "One run", "Run")
def get_run(call: Call) -> Any:
    return run_ops.get_run(call.queue, run_id(call))


@route("GET", "/v1/runs/{run_id}/log", READ, "The last lines of a run's log", "LogTail",
       query={"lines": integer(0, MAX_TAIL_LINES, 100)})
def log_tail(call: Call) -> Any:
    run = run_ops.get_run(call.queue, run_id(call))
    lines = call.int_query("lines")
    with log_ops.open_log(call.queue, run) as log_file:
        text = log_ops.tail(log_file, lines)
    return {"run_id": run.id, "task_id": run.task_id, "ended": run.ended_at is not None,
            "text": text.decode("utf-8", "replace")}


def run_id(call: Call) -> int:
    return path_int(call.params, "run_id")


# -- jobs -------------------------------------------------------------------------------


@route("GET", "/v1/jobs", READ, "Every job with its last fire", "JobList")
def list_jobs(call: Call) -> Any:
    return job_ops.list_jobs(call.queue, call.now)


@route("GET", "/v1/jobs/{name}", READ, "A job with its recent fires", "JobDetail",
       query={"fires": integer(0, 1000, 10)})
def get_job(call: Call) -> Any:
    return job_ops.get_job(call.queue, call.params["name"], call.int_query("fires"))


@route("GET", "/v1/jobs/{name}/next", READ, "A job's next fire times", "FireTimes",
       query={"count": integer(1, 1000, 5)})
def next_fires(call: Call) -> Any:
    count = call.int_query("count")
    return {"name": call.params["name"],
            "fires": job_ops.next_fire_times(call.queue, call.params["name"], call.now, count)}


@route("POST", "/v1/jobs", MANAGE, "Add a job (a [[jobs]] table as JSON)", "Job", status=201,
       body="JobTable")
def add_job(call: Call) -> Any:
    return job_ops.add_job(call.queue, call.body_object(), call.now)


@route("PATCH", "/v1/jobs/{name}", MANAGE, "Change a job made here (fields not given are kept)",
       "Job", body="JobChanges")
def update_job(call: Call) -> Any:
    changes = dict(call.body_object())
    clear = changes.pop("clear", [])
    if not isinstance(clear, list):
        raise ApiError(422, "clear: expected a list of field names", "clear")
    return job_ops.update_job(call.queue, call.params["name"], changes, call.now, clear)


@route("POST", "/v1/jobs/{name}/enable", MANAGE, "Enable a job", "Job")
def enable_job(call: Call) -> Any:
    return job_ops.enable_job(call.queue, call.params["name"], call.now)


@route("POST", "/v1/jobs/{name}/disable", MANAGE, "Disable a job", "Job")
def disable_job(call: Call) -> Any:
    return job_ops.disable_job(call.queue, call.params["name"], call.now)


@route("POST", "/v1/jobs/{name}/run", ACT, "Fire a job at the scheduler's next tick", "Accepted",
       status=202)
def run_job(call: Call) -> Any:
    job_ops.run_job_now(call.queue, call.params["name"], call.now)
    return {"accepted": True, "name": call.params["name"]}


# -- the board, costs, cooldowns ----------------------------------------------------------


@route("GET", "/v1/status", READ, "The status board", "Status")
def status(call: Call) -> Any:
    return board.status_board(call.queue, call.now)


@route("GET", "/v1/cost", READ, "Runs, cost and tokens by role or by day", "CostRows",
       query={"by": choice(run_ops.COST_KEYS, "role"), "since": UNIX_SECONDS})
def cost(call: Call) -> Any:
    return run_ops.cost(call.queue, call.choice_query("by"), call.float_query("since"),
                        call.now)


@route("GET", "/v1/charts/{chart}", READ, "One of the dashboard's charts over a range: each "
       "bucket's start (unix seconds) and a series of values a bucket", "Chart",
       query={"range": choice(chart_ops.RANGES, chart_ops.DEFAULT_RANGE)})
def chart(call: Call) -> Any:
    name = call.params["chart"]
    if name not in chart_ops.CHARTS:
        raise ApiError(404, f"no chart {name!r}: expected one of {', '.join(chart_ops.CHARTS)}",
                       "chart")
    return chart_ops.chart(call.queue, name, call.choice_query("range") or "", call.now)


@route("GET", "/v1/cooldowns", READ, "Runtimes paused by a rate limit", "CooldownList")
def cooldowns(call: Call) -> Any:
    return cooldown_ops.active_cooldowns(call.queue, call.now)


# -- tokens -----------------------------------------------------------------------------


@route("GET", "/v1/tokens", MANAGE, "Every API token (never the secret)", "TokenList")
def list_tokens(call: Call) -> Any:
    return [token.to_dict() | {"status": token.status(call.now)}
            for token in token_ops.list_tokens(call.queue)]


@route("POST", "/v1/tokens", MANAGE, "Make a token; the secret is in this answer only",
       "NewToken", status=201, body="TokenRequest")
def create_token(call: Call) -> Any:
    body = call.body_object()
    unknown = sorted(set(body) - {"name", "scope", "expires", "roles", "rate_per_minute"})
    if unknown:
        raise BadInput(f"unknown field {unknown[0]!r} (accepted: name, scope, expires, roles, "
                       "rate_per_minute)")
    roles = body.get("roles") or []
    if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
        raise BadInput(f"roles = {roles!r}: expected a list of role names")
    made = token_ops.create_token(call.queue, body.get("name"), body.get("scope"), call.now,
                                  expires=body.get("expires"), roles=roles,
                                  rate_per_minute=body.get("rate_per_minute"))
    return made.record.to_dict() | {"token": made.token}


@route("DELETE", "/v1/tokens/{name}", MANAGE, "Revoke a token at once (never the last live "
       "admin token: 409)", "RevokedToken")
def revoke_token(call: Call) -> Any:
    revoked = token_ops.revoke_token(call.queue, call.params["name"], call.now)
    itself = call.caller.token is not None and call.caller.token.id == revoked.id
    answer = revoked.to_dict() | {"revoked_itself": itself}
    if itself:
        answer["note"] = ("the token that sent this request is the one revoked: it is refused "
                          "from now on")
    return answer
