"""OpenClaw's cron store (`~/.openclaw/cron/jobs.json`): `{"version": 1, "jobs": [...]}`.

A job keeps its trigger and zone; an `every` keeps its anchor (it is counted in real time
from `anchorMs`, so it becomes an `every` in UTC whose daily window starts on the anchor's
grid); an `at` is a one-shot; `deleteAfterRun` deletes the job after its fire; its message is
the task's prompt; its `agentId` names the role (`--role-map` renames it). The job's
`state.nextRunAtMs` is kept as its first fire, so nothing fires twice or is skipped on the
day of the switch.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from taskherd.importers.fires import EveryRule, OnceRule, SourceRule, croner_rule
from taskherd.importers.model import (
    Dropped,
    Imported,
    ImportedJob,
    ImportError_,
    build_trigger,
    decode_text,
    job_name,
)

DAY_MS = 86_400_000
_READ = {"id", "name", "agentId", "enabled", "schedule", "payload", "sessionTarget",
         "deleteAfterRun", "state", "createdAtMs", "updatedAtMs"}
_WHY = {
    "delivery": "taskherd tells delivery aliases when a task settles: set deliver_to on the "
                "job (`taskherd alias add`)",
    "wakeMode": "taskherd's scheduler fires on time by itself",
    "description": "kept in OpenClaw only",
}


def parse(file: str, data: bytes, default_tz: str | None,
          role_map: dict[str, str] | None = None) -> Imported:
    try:
        document = json.loads(decode_text(file, data))
    except json.JSONDecodeError as error:
        raise ImportError_(file, None, "json", f"not valid JSON: {error.msg} at line "
                           f"{error.lineno} column {error.colno}") from None
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), list):
        raise ImportError_(file, None, "jobs", 'expected {"version": 1, "jobs": [...]}')
    if document.get("version", 1) != 1:
        raise ImportError_(file, None, "version", f"{document.get('version')!r}: only version "
                           "1 is known")
    result = Imported()
    for index, job in enumerate(document["jobs"]):
        if not isinstance(job, dict) or not isinstance(job.get("id"), str) or not job["id"]:
            raise ImportError_(file, f"jobs[{index}]", "id", "expected a job object with an id")
        result.jobs.append(_job(file, job, default_tz, role_map or {}, result))
    return result


def _job(file: str, job: dict[str, Any], default_tz: str | None, role_map: dict[str, str],
         result: Imported) -> ImportedJob:
    ident = job["id"]
    agent = job.get("agentId", "main")
    if not isinstance(agent, str) or not agent:
        raise ImportError_(file, ident, "agentId", f"{agent!r} is not an agent name")
    table: dict[str, Any] = {"name": job_name("openclaw", ident),
                             "role": role_map.get(agent, agent),
                             "title": _text(file, ident, job, "name", ident),
                             "prompt": _prompt(file, ident, job.get("payload"), result)}
    enabled = job.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ImportError_(file, ident, "enabled", f"{enabled!r}: expected true or false")
    table["enabled"] = enabled
    delete = job.get("deleteAfterRun", False)
    if delete is True:
        table["delete_after_run"] = True
    state = job.get("state")
    state = state if isinstance(state, dict) else {}
    start = state.get("nextRunAtMs")
    if start is not None and (isinstance(start, bool) or not isinstance(start, int | float)):
        raise ImportError_(file, ident, "state.nextRunAtMs", f"{start!r}: expected milliseconds")
    notes, every = _schedule(file, ident, job.get("schedule"), table, start, job.get("createdAtMs"))
    if job.get("sessionTarget", "isolated") == "main":
        result.dropped.append(Dropped(file, ident, "sessionTarget", "'main': each taskherd task "
                                      "is a run of its own, as OpenClaw's 'isolated'"))
    for key in sorted(set(job) - _READ):
        result.dropped.append(Dropped(file, ident, key, _WHY.get(key, "not a field taskherd "
                                                                 "reads")))
    trigger = build_trigger(file, ident, table, default_tz)
    return ImportedJob(ident, table, trigger, None,
                       start_at=None if start is None else start / 1000, notes=tuple(notes),
                       rule=json.dumps(job.get("schedule"), sort_keys=True),
                       source_rule=every or _source_rule(table, trigger))


def _source_rule(table: dict[str, Any], trigger: Any) -> SourceRule:
    if "cron" in table:
        return croner_rule(table["cron"], trigger.tz)
    return OnceRule(trigger.at)


def _prompt(file: str, ident: str, payload: Any, result: Imported) -> str:
    if not isinstance(payload, dict):
        raise ImportError_(file, ident, "payload", "expected {\"kind\": \"agentTurn\", "
                           "\"message\"} or {\"kind\": \"systemEvent\", \"text\"}")
    kind = payload.get("kind")
    if kind == "agentTurn":
        key = "message"
    elif kind == "systemEvent":
        key = "text"
    else:
        raise ImportError_(file, ident, "payload.kind", f"{kind!r}: expected agentTurn or "
                           "systemEvent")
    text = payload.get(key)
    if not isinstance(text, str):
        raise ImportError_(file, ident, f"payload.{key}", "expected text")
    for extra in sorted(set(payload) - {"kind", key}):
        result.dropped.append(Dropped(file, ident, f"payload.{extra}", "set it on the role "
                                      "(model, timeout…) in taskherd.toml"))
    return text


def _schedule(file: str, ident: str, schedule: Any, table: dict[str, Any], next_ms: Any,
              created_ms: Any) -> tuple[list[str], EveryRule | None]:
    if not isinstance(schedule, dict):
        raise ImportError_(file, ident, "schedule", "expected an object with a kind")
    kind = schedule.get("kind")
    if kind == "cron":
        expr = schedule.get("expr")
        if not isinstance(expr, str):
            raise ImportError_(file, ident, "schedule.expr", "expected a cron expression")
        fields = expr.split()
        if len(fields) == 6 and fields[0] == "0":  # croner's seconds field, at second 0
            expr = " ".join(fields[1:])
        table["cron"] = expr
        if schedule.get("tz") is not None:
            table["timezone"] = schedule["tz"]
        table["dst_gap"] = "skip"  # croner skips a time in a gap (its README: DST handling)
        return [], None
    if kind == "every":
        return _every(file, ident, schedule, table, next_ms, created_ms)
    if kind == "at":
        table.update(_at(file, ident, schedule))
        return ["a one-shot"], None
    raise ImportError_(file, ident, "schedule.kind", f"{kind!r}: expected cron, every or at")


def _every(file: str, ident: str, schedule: dict[str, Any], table: dict[str, Any],
           next_ms: Any, created_ms: Any) -> tuple[list[str], EveryRule]:
    given, counted = schedule.get("anchorMs"), "its anchor"
    # Without an anchor OpenClaw counts from a fire it planned, else from the job's creation.
    if given is None:
        given, counted = next((int(v), why) for v, why in (
            (next_ms, "its planned next run"), (created_ms, "its creation"), (0, "midnight UTC"))
            if isinstance(v, int | float) and not isinstance(v, bool))
    every = _whole_ms(file, ident, "everyMs", schedule.get("everyMs"), least=1)
    anchor = _whole_ms(file, ident, "anchorMs", given, least=0)
    # Fires at anchor + k·every in real time. taskherd's `every` is a grid from each day's
    # window start, so it is exact in UTC (no daylight saving) when the interval divides the
    # day and the grid lands on whole minutes (a window is written to the minute).
    if every % 60_000 or DAY_MS % every:
        raise ImportError_(file, ident, "schedule.everyMs", f"{every}: unsupported: taskherd's "
                           "every takes whole minutes that divide a day (e.g. 15m, 2h, 1d)")
    offset = anchor % every  # the first fire of each UTC day: `every` divides the day
    if offset % 60_000:
        raise ImportError_(file, ident, "schedule.anchorMs", f"{anchor}: unsupported: the "
                           "anchor must fall on a whole minute")
    table.update(every=f"{every // 1000}s", timezone="UTC")
    if offset:
        start = datetime.fromtimestamp(offset / 1000, UTC)
        table["window"] = f"{start:%H:%M}-23:59"
    return [f"counted in UTC from {counted}, as OpenClaw counts it"], EveryRule(anchor, every)


def _whole_ms(file: str, ident: str, key: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ImportError_(file, ident, f"schedule.{key}", f"{value!r}: expected whole "
                           "milliseconds")
    return value


def _at(file: str, ident: str, schedule: dict[str, Any]) -> dict[str, Any]:
    if "atMs" in schedule:
        at = schedule["atMs"]
        if isinstance(at, bool) or not isinstance(at, int):
            raise ImportError_(file, ident, "schedule.atMs", f"{at!r}: expected milliseconds")
        return {"at": datetime.fromtimestamp(at / 1000, UTC).isoformat(), "timezone": "UTC"}
    at = schedule.get("at")
    if not isinstance(at, str):
        raise ImportError_(file, ident, "schedule.at", "expected atMs or an ISO 8601 time")
    try:
        moment = datetime.fromisoformat(at)
    except ValueError:
        raise ImportError_(file, ident, "schedule.at", f"{at!r} is not an ISO 8601 time") from None
    table: dict[str, Any] = {"at": moment.isoformat()}
    if moment.tzinfo is not None:
        table["timezone"] = "UTC"  # an instant: its zone only shapes how it is shown
        table["at"] = moment.astimezone(UTC).isoformat()
    return table


def _text(file: str, ident: str, job: dict[str, Any], key: str, default: str) -> str:
    value = job.get(key, default)
    if not isinstance(value, str):
        raise ImportError_(file, ident, key, f"{value!r}: expected text")
    return value or default
