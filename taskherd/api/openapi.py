"""The OpenAPI 3.1 document at /v1/openapi.json, built from the declared routes.

The paths come from `app.ROUTES` (the routes the app serves, with the schemas of their query
parameters), the shapes from SCHEMAS, built from the lists the server checks against (task
fields, job keys, states): a request the document calls invalid is refused. Tests validate
the document (openapi-spec-validator), call every route and validate each answer, and run
schemathesis against a real daemon.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from taskherd import __version__
from taskherd.model import Outcome, TaskState
from taskherd.model.delivery import EVENTS
from taskherd.ops.agent_requests import OPS as AGENT_OPS
from taskherd.ops.charts import CHARTS, RANGES
from taskherd.ops.jobs import CLEARABLE
from taskherd.policy.jobs import JOB_KEYS
from taskherd.policy.taskspec import ALIAS_NAME, TITLE_LIMIT
from taskherd.policy.timefmt import is_time

NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
ISO = {"type": "string", "format": "date-time"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: dict[str, Any], closed: bool = True, **optional: Any) -> dict[str, Any]:
    """An object the server answers: every time (unix seconds) comes with its ISO 8601 form
    beside it (timefmt.with_iso)."""
    answer = body(required, closed, **optional)
    answer["properties"] |= {f"{name}_iso": ISO for name, schema in answer["properties"].items()
                             if schema in (NUM, nullable(NUM)) and is_time(name, 0.0)}
    # Never required: a time that is null has no ISO twin (a schema built on another's
    # properties would otherwise require them).
    answer["required"] = [name for name in answer["required"]
                          if not (name.endswith("_iso") and name[:-4] in answer["properties"])]
    return answer


def body(required: dict[str, Any], closed: bool = True, **optional: Any) -> dict[str, Any]:
    """An object a client sends: exactly its fields (no `_iso` twins, which the server would
    refuse as unknown)."""
    return {"type": "object", "required": sorted(required),
            "properties": required | optional, "additionalProperties": not closed}


def array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


STATE = {"type": "string", "enum": [state.value for state in TaskState]}
TASK = obj({
    "id": INT, "role": STR, "title": STR, "prompt": STR,
    "priority": {"type": "string", "pattern": "^P[0-4]$"}, "state": STATE,
    "pool": nullable(STR), "dedup_key": nullable(STR), "review": BOOL, "attempts": INT,
    "max_attempts": INT, "rescues": INT, "rate_limits": INT, "run_after": NUM,
    "lease_node": nullable(STR), "lease_expires_at": nullable(NUM),
    "last_error": nullable(STR), "error_tail": nullable(STR), "summary": nullable(STR),
    "reason": nullable(STR), "parent_id": nullable(INT), "meta": {"type": "object"},
    "created_at": NUM, "updated_at": NUM, "finished_at": nullable(NUM),
    "root_id": nullable(INT), "depth": INT, "chain": array({"type": "object"}),
    "rejections": INT,
})
RUN = obj({
    "id": INT, "task_id": INT, "attempt": INT, "node": STR, "role": STR,
    "runtime": nullable(STR), "pid": nullable(INT), "pid_started_at": nullable(NUM),
    "log_path": nullable(STR), "claimed_at": NUM, "spawned_at": nullable(NUM),
    "heartbeat_at": nullable(NUM), "progress": nullable(STR), "ended_at": nullable(NUM),
    "exit_code": nullable(INT),
    "outcome": nullable({"type": "string", "enum": [outcome.value for outcome in Outcome]}),
    "summary": nullable(STR), "error": nullable(STR), "cost_usd": nullable(NUM),
    "input_tokens": nullable(INT), "output_tokens": nullable(INT), "turns": nullable(INT),
    "session_id": nullable(STR), "report": nullable(STR), "report_summary": nullable(STR),
    "liveness": nullable(STR), "liveness_since": nullable(NUM), "liveness_note": nullable(STR),
    "pool": nullable(STR),
})
JOB = obj({"name": STR, "enabled": BOOL, "source": STR, "trigger": {"type": "object"},
           "timezone": STR, "next_run_at": nullable(NUM)}, closed=False)
TOKEN = obj({"id": INT, "name": STR,
             "scope": {"type": "string", "enum": ["admin", "operator", "read", "intake"]},
             "roles": nullable(array(STR)), "rate_per_minute": nullable(INT),
             "created_at": NUM, "expires_at": nullable(NUM), "revoked_at": nullable(NUM)})
COOLDOWN = obj({"runtime": STR, "until": NUM, "reason": STR, "created_at": NUM,
                "span": nullable(NUM)}, probe_node=nullable(STR), probe_run_id=nullable(INT),
               probe_started_at=nullable(NUM), down_since=nullable(NUM))
# A runtime whose endpoint is down (ops/board.py endpoints_down).
ENDPOINT_DOWN = obj({"runtime": STR, "since": NUM, "reason": STR, "next_probe": NUM,
                     "probing": BOOL})
# A task as a client adds it: every field `taskspec.new_task_from` takes (absent or null for
# the optional ones, but for the flags and meta), and no other.
NEW_TASK = body(
    {"role": {"type": "string", "minLength": 1},
     "title": {"type": "string", "minLength": 1, "maxLength": TITLE_LIMIT}},
    prompt=nullable(STR),
    priority={"anyOf": [{"type": "string", "pattern": r"^\s*[Pp]?[0-3]\s*$"},
                        {"type": "integer", "minimum": 0, "maximum": 3}]},
    pool=nullable(STR), dedup_key=nullable(STR),
    max_attempts=nullable({"type": "integer", "minimum": 1}),
    review=BOOL, pending=BOOL, run_after=nullable(NUM),
    parent_id=nullable({"type": "integer", "minimum": 1}), meta={"type": "object"},
    deliver_to=nullable(array({"type": "string", "pattern": ALIAS_NAME.pattern})),
    on=nullable({"type": "array", "minItems": 1,
                 "items": {"type": "string", "enum": list(EVENTS)}}),
    chain=nullable(array({"type": "object"})),
)
# A job's keys as `[[jobs]]` takes them (`jobs.parse_job` checks their values).
JOB_FIELDS: dict[str, Any] = {key: {} for key in JOB_KEYS if key not in ("name", "role")}
SCOPE = {"type": "string", "enum": ["admin", "operator", "read", "intake"]}
COUNTS = {"type": "object", "additionalProperties": INT,
          "required": [state.value for state in TaskState]}

# A chart's series: one value a bucket, null where nothing was measured.
SERIES = obj({"name": STR, "values": array(nullable(NUM))})
COUNT_SERIES = obj({"name": STR, "values": array(INT)})
CHART = obj(
    {"chart": {"type": "string", "enum": list(CHARTS)}, "title": STR,
     "range": {"type": "string", "enum": list(RANGES)}, "bucket_seconds": INT,
     "from_at": NUM, "until_at": NUM, "times": array(NUM), "series": array(SERIES)},
    unit=STR, totals={"type": "object", "additionalProperties": INT}, runs=array(INT),
    overall=obj({"p50": nullable(NUM), "p95": nullable(NUM)}),
    running=array(SERIES), samples=array(INT), unpriced=array(COUNT_SERIES),
    by_outcome=array(obj({"role": STR, "outcome": STR, "runs": INT, "cost_usd": NUM,
                          "unpriced_runs": INT})))

SCHEMAS: dict[str, dict[str, Any]] = {
    "Error": obj({"error": STR, "status": INT}, field=STR),
    "Task": TASK,
    "Run": RUN,
    "TaskPage": obj({"tasks": array(ref("Task")), "next_cursor": nullable(INT)}),
    "Added": obj({"task": ref("Task"), "created": BOOL}),
    "Imported": obj({"read": INT, "created": INT, "roles": array(STR)}),
    "TaskWithRuns": obj({"task": ref("Task"), "runs": array(ref("Run")),
                         "cost_usd": nullable(NUM), "unpriced_runs": INT}),
    "RunList": array(ref("Run")),
    "LogTail": obj({"run_id": INT, "task_id": INT, "ended": BOOL, "text": STR}),
    "Job": JOB,
    "JobList": array(obj({"name": STR, "synced": BOOL, "last_fire": nullable(
        {"type": "object"})}, closed=False)),
    "JobDetail": obj({"name": STR, "fires": array({"type": "object"})}, closed=False),
    "FireTimes": obj({"name": STR, "fires": array(NUM)}),
    "Accepted": obj({"accepted": BOOL, "name": STR}),
    "Status": obj({"by_role": {"type": "object", "additionalProperties": COUNTS},
                   "total": COUNTS, "cooldowns": array(ref("Cooldown")),
                   "cost": array({"type": "object"}), "nodes": array({"type": "object"}),
                   "unserved": array({"type": "object"}),
                   "backup": {"type": "object"}, "endpoints_down": array(ENDPOINT_DOWN),
                   "p0_waiting": array(obj({"task_id": INT, "role": STR, "state": STR,
                                            "waits_for": STR}))}),
    "CostRows": array(obj({"runs": INT, "cost_usd": nullable(NUM), "unpriced_runs": INT,
                           "input_tokens": INT, "output_tokens": INT}, closed=False)),
    "Chart": CHART,
    "Cooldown": COOLDOWN,
    "CooldownList": array(ref("Cooldown")),
    "Token": TOKEN,
    "RevokedToken": obj(TOKEN["properties"] | {"revoked_itself": BOOL}, note=STR),
    "TokenList": array(obj({"name": STR, "scope": STR, "status": STR}, closed=False)),
    "NewToken": obj({"name": STR, "scope": STR, "token": STR}, closed=False),
    "AgentAnswer": obj({"run_id": INT}, closed=False, verdict=STR, task=ref("Task"),
                       created=BOOL),
    # Bodies
    "NewTask": NEW_TASK,
    "TaskImport": body({"tasks": array(ref("NewTask"))}),
    "Reason": body({}, reason=nullable(STR)),
    "PriorityChange": body({"priority": {"type": "integer", "minimum": 0, "maximum": 3}}),
    "JobTable": body({"name": STR, "role": STR}, **JOB_FIELDS),
    "JobChanges": body({}, clear=array({"type": "string", "enum": list(CLEARABLE)}),
                       name=STR, role=STR, **JOB_FIELDS),
    "TokenRequest": body({"name": STR, "scope": SCOPE}, expires=nullable(STR),
                         roles=nullable(array(STR)), rate_per_minute=nullable(INT)),
    # Each op's arguments: the agent door refuses an argument its op does not take.
    "AgentArgs": {"type": "object"},
    # One message of a server-sent event stream, as a client's parser gives it.
    "ServerSentEvent": obj({}, event=STR, data=STR, id=STR, retry=INT),
}
ERRORS = {"400": "Malformed request", "401": "No valid token", "403": "Not allowed for this scope",
          "404": "No such thing", "409": "Refused by the queue's state",
          "413": "Body too large", "422": "A field is not accepted", "429": "Slow down",
          "503": "The database is locked, full or out of reach: try again (Retry-After)"}


# Path parameters by name: ids are whole numbers (`app.path_int`), names are text.
ID = {"type": "integer", "minimum": 0, "maximum": 10**18 - 1}
PATH_PARAMETERS: dict[str, dict[str, Any]] = {
    "task_id": ID, "run_id": ID, "name": {"type": "string", "minLength": 1},
    "op": {"type": "string", "enum": list(AGENT_OPS)},
    "chart": {"type": "string", "enum": list(CHARTS)},
}
# The streams, served beside the declared routes (`asgi.build_app`).
STREAMS = (
    ("/v1/events", "stream_events", "Every committed change, as server-sent events",
     {"gather": {"type": "number", "minimum": 0.1, "maximum": 60,
                 "description": "Instead of every event, `changed` at most once every this "
                                "many seconds (0.1 to 60), naming the kinds of the changes "
                                "gathered"}}),
    ("/v1/runs/{run_id}/log/stream", "stream_run_log", "A run's log as it grows (SSE)",
     {"lines": {"type": "integer", "minimum": 0, "maximum": 10_000, "default": 100,
                "description": "How many of the log's last lines to send first"}}),
)
# The routes that take a body it cannot do without.
BODY_OPTIONAL = {"Reason", "AgentArgs"}


@functools.cache
def document() -> dict[str, Any]:
    from taskherd.api.app import ROUTES

    paths: dict[str, dict[str, Any]] = {}
    for spec in ROUTES:
        operation: dict[str, Any] = {
            "summary": spec.summary,
            "operationId": spec.handler.__name__,
            "parameters": _parameters(spec.path, spec.query),
            "responses": {str(spec.status): _json(ref(spec.response), spec.summary)}
            | _errors(),
        }
        if spec.body:
            content = {"application/json": {"schema": ref(spec.body)}}
            if spec.body == "TaskImport":
                content["application/x-ndjson"] = {"schema": {
                    "type": "string", "description": "One task (a NewTask) a line"}}
            operation["requestBody"] = {"required": spec.body not in BODY_OPTIONAL,
                                        "content": content}
        if spec.need is not None:
            operation["security"] = [{"bearer": []}]
        paths.setdefault(spec.path, {})[spec.method.lower()] = operation
    for path, operation_id, summary, query in STREAMS:
        paths[path] = {"get": {
            "summary": summary, "operationId": operation_id, "security": [{"bearer": []}],
            "parameters": _parameters(path, query),
            "responses": {"200": {"description": summary, "content": {
                "text/event-stream": {"schema": ref("ServerSentEvent")}}}} | _errors()}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "taskherd", "version": __version__},
        "paths": paths,
        "components": {"schemas": SCHEMAS, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _parameters(path: str, query: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return ([{"name": name, "in": "path", "required": True, "schema": PATH_PARAMETERS[name]}
             for name in re.findall(r"{(\w+)}", path)]
            + [{"name": name, "in": "query", "required": False, "schema": schema}
               for name, schema in query.items()])


def _errors() -> dict[str, Any]:
    return {code: _json(ref("Error"), why) for code, why in ERRORS.items()}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}
