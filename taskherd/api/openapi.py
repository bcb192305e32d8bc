"""The OpenAPI 3.1 document at /v1/openapi.json, built from the declared routes.

The paths come from `app.ROUTES` (the routes the app serves), the shapes from SCHEMAS; a
test calls every route and validates each answer against this document.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from taskherd import __version__
from taskherd.model import Outcome, TaskState
from taskherd.timefmt import is_time

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
    properties = required | optional
    # Every time (unix seconds) is answered with its ISO 8601 form beside it (timefmt.with_iso).
    properties |= {f"{name}_iso": ISO for name, schema in properties.items()
                   if schema in (NUM, nullable(NUM)) and is_time(name, 0.0)}
    return {"type": "object", "required": sorted(required),
            "properties": properties, "additionalProperties": not closed}


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
COUNTS = {"type": "object", "additionalProperties": INT,
          "required": [state.value for state in TaskState]}

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
    "Cooldown": COOLDOWN,
    "CooldownList": array(ref("Cooldown")),
    "Token": TOKEN,
    "RevokedToken": obj(TOKEN["properties"] | {"revoked_itself": BOOL}, note=STR),
    "TokenList": array(obj({"name": STR, "scope": STR, "status": STR}, closed=False)),
    "NewToken": obj({"name": STR, "scope": STR, "token": STR}, closed=False),
    "AgentAnswer": obj({"run_id": INT}, closed=False, verdict=STR, task=ref("Task"),
                       created=BOOL),
    # Bodies
    "NewTask": obj({"role": STR, "title": STR}, closed=False, prompt=STR,
                   priority={"anyOf": [STR, INT]}, pool=STR, dedup_key=STR),
    "TaskImport": obj({"tasks": array(ref("NewTask"))}),
    "Reason": obj({}, reason=STR),
    "JobTable": obj({"name": STR}, closed=False),
    "JobChanges": obj({}, closed=False, clear=array(STR)),
    "TokenRequest": obj({"name": STR, "scope": STR}, expires=STR, roles=array(STR),
                        rate_per_minute=INT),
    "AgentArgs": {"type": "object"},
}
ERRORS = {"400": "Malformed request", "401": "No valid token", "403": "Not allowed for this scope",
          "404": "No such thing", "409": "Refused by the queue's state",
          "413": "Body too large", "422": "A field is not accepted", "429": "Slow down",
          "503": "The database is locked, full or out of reach: try again (Retry-After)"}


@functools.cache
def document() -> dict[str, Any]:
    from taskherd.api.app import ROUTES

    paths: dict[str, dict[str, Any]] = {}
    for spec in ROUTES:
        operation: dict[str, Any] = {
            "summary": spec.summary,
            "operationId": spec.handler.__name__,
            "parameters": [{"name": name, "in": "path", "required": True, "schema": STR}
                           for name in re.findall(r"{(\w+)}", spec.path)]
            + [{"name": name, "in": "query", "required": False, "schema": STR}
               for name in spec.query],
            "responses": {str(spec.status): _json(ref(spec.response), spec.summary)}
            | {code: _json(ref("Error"), why) for code, why in ERRORS.items()},
        }
        if spec.body:
            operation["requestBody"] = {"required": False, "content": {
                "application/json": {"schema": ref(spec.body)}}}
        if spec.need is not None:
            operation["security"] = [{"bearer": []}]
        paths.setdefault(spec.path, {})[spec.method.lower()] = operation
    for path, summary in (("/v1/events", "Every committed change, as server-sent events"),
                          ("/v1/runs/{run_id}/log/stream", "A run's log as it grows (SSE)")):
        paths[path] = {"get": {"summary": summary, "security": [{"bearer": []}],
                               "responses": {"200": {"description": summary, "content": {
                                   "text/event-stream": {"schema": STR}}}}}}
    paths["/v1/events"]["get"]["parameters"] = [{
        "name": "gather", "in": "query", "required": False,
        "description": "Instead of every event, `changed` at most once every this many "
                       "seconds (0.1 to 60), naming the kinds of the changes gathered",
        "schema": {"type": "number", "minimum": 0.1, "maximum": 60}}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "taskherd", "version": __version__},
        "paths": paths,
        "components": {"schemas": SCHEMAS, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}
