"""Runs: how the running ones are doing, which look stale, and what they cost."""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from taskherd.model import Run
from taskherd.ops import BadInput, Queue
from taskherd.policy.costs import known_cost
from taskherd.policy.liveness import last_activity as recorded_activity
from taskherd.policy.liveness import next_threshold, node_down_reason, stale_reason, verdict_text

COST_KEYS = ("role", "day")


def stale_runs(queue: Queue, now: float, idle_after: float | None = None
               ) -> list[tuple[Run, str]]:
    """Open runs that look stuck, each with why: its node down, its lease expired, never
    spawned, or silent longer than the role's idle_timeout (or `idle_after` seconds)."""
    if idle_after is not None and idle_after <= 0:
        raise BadInput(f"idle_after = {idle_after!r}: expected seconds > 0")
    store = queue.store
    nodes = {node.name: node for node in store.list_nodes()}
    found = []
    for run in store.open_runs():
        role = queue.config.role(run.role)
        why = node_down_reason(nodes.get(run.node), now) or stale_reason(
            run, store.get_task(run.task_id).lease_expires_at, spawn_timeout=role.spawn_timeout,
            idle_timeout=role.idle_timeout if idle_after is None else idle_after, now=now,
            last_seen=last_activity(run))
        if why:
            found.append((run, why))
    return found


def last_activity(run: Run) -> float:
    """A run's latest sign of life: what the store recorded (claimed, spawned, a heartbeat)
    or its log last written, whichever is later. Agents that never call `taskherd heartbeat`
    show their output here; a log on another node's disk is not seen."""
    seen = recorded_activity(run)
    if run.log_path:
        try:
            seen = max(seen, os.stat(run.log_path).st_mtime)
        except OSError:
            pass
    return seen


def liveness(queue: Queue, run: Run, now: float) -> dict[str, Any] | None:
    """The supervisor's verdict on an open run in words (active, quiet since T, waiting for
    input: "…", looping) and the next threshold that falls if nothing changes (None for a
    run that has ended)."""
    if run.ended_at is not None:
        return None
    role = queue.config.role(run.role)
    upcoming = next_threshold(run, input_timeout=role.input_timeout,
                              idle_timeout=role.idle_timeout, timeout=role.timeout, now=now)
    return {"verdict": verdict_text(run, now), "state": run.liveness,
            "since": run.liveness_since, "question": run.liveness_note
            if run.liveness == "waiting_input" else None,
            "next": upcoming[0] if upcoming else None, "next_at": upcoming[1] if upcoming else None}


def open_liveness(queue: Queue, runs: Iterable[Run], now: float) -> dict[int, dict[str, Any]]:
    """`liveness` of each open run among `runs`, by run id (an ended run has none)."""
    return {run.id: words for run in runs if (words := liveness(queue, run, now)) is not None}


def cost(queue: Queue, by: str, since: float | None, now: float) -> list[dict[str, Any]]:
    """Runs, cost and tokens summed by the database per role or per day (days of the fleet's
    zone, else the machine's) for the runs started since `since` (all when None). The runs of
    unknown cost are counted apart (`unpriced_runs`), never as $0 (see taskherd.policy.costs)."""
    if by not in COST_KEYS:
        raise BadInput(f"by = {by!r}: expected one of {', '.join(COST_KEYS)}")
    store = queue.store
    if by == "role":
        start = since if since is not None else float("-inf")
        return [{"role": row["role"], "runs": row["runs_week"],
                 "cost_usd": known_cost(row["cost_week"], row["unpriced_week"]),
                 "unpriced_runs": row["unpriced_week"],
                 "input_tokens": row["input_tokens_week"],
                 "output_tokens": row["output_tokens_week"]}
                for row in store.spend_by_role(start, start)]
    first = store.first_run_start() if since is None else since
    if first is None:
        return []
    zone = ZoneInfo(queue.config.daemon.timezone) if queue.config.daemon.timezone else None
    starts = day_starts(first, now, zone)
    return [{"day": _day_label(row.pop("day_start"), zone), **row,
             "cost_usd": known_cost(row["cost_usd"], row["unpriced_runs"])}
            for row in store.cost_by_day(starts, first)]


def day_starts(first: float, last: float, zone: ZoneInfo | None) -> list[float]:
    """The midnights, in `zone` (None: the machine's), of every day from `first`'s to `last`'s.

    Walking by calendar date, not by 86,400 s: a day of a daylight-saving change lasts 23 or
    25 hours.
    """
    day = datetime.fromtimestamp(first, zone).date()
    end = datetime.fromtimestamp(max(first, last), zone).date()
    starts = []
    while day <= end:
        midnight = datetime.combine(day, time(), zone)
        starts.append((midnight if zone else midnight.astimezone()).timestamp())
        day += timedelta(days=1)
    return starts


def _day_label(day_start: float, zone: ZoneInfo | None) -> str:
    return datetime.fromtimestamp(day_start, zone).strftime("%Y-%m-%d")


def list_runs(queue: Queue, *, role: str | None = None, since: float | None = None,
              limit: int = 100) -> list[Run]:
    """Runs, newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise BadInput(f"limit = {limit!r}: expected a whole number from 1 to 1000")
    return queue.store.list_runs(role=role, since=since, limit=limit)


def get_run(queue: Queue, run_id: int) -> Run:
    return queue.store.get_run(run_id)


def runs_of_job(queue: Queue, job: str, *, role: str | None = None, since: float | None = None,
                limit: int = 100) -> list[Run]:
    """The runs of `job`'s tasks, newest first; only `role`'s when given."""
    runs = queue.store.runs_of_job(job, since=since, limit=limit)
    return [run for run in runs if role is None or run.role == role]


def open_runs(queue: Queue) -> list[Run]:
    """Runs that have not ended, on every node."""
    return queue.store.open_runs()


def cost_by_role_and_day(queue: Queue, now: float, days: int = 14) -> dict[str, Any]:
    """Cost per role per day over the last `days` days of the fleet's zone (for a chart):
    the days in order, per role one amount a day (the known dollars), and in `unpriced` per
    role the runs of unknown cost each day (not in the dollars)."""
    zone = ZoneInfo(queue.config.daemon.timezone) if queue.config.daemon.timezone else None
    starts = day_starts(now - (days - 1) * 86400, now, zone)[-days:]
    labels = [_day_label(start, zone) for start in starts]
    by_role: dict[str, list[float]] = {}
    unpriced: dict[str, list[int]] = {}
    for row in queue.store.spend_since(starts[0] - 3600):  # the hour holding the first midnight
        index = max((i for i, start in enumerate(starts) if start <= row["at"]), default=0)
        by_role.setdefault(row["role"], [0.0] * len(starts))[index] += row["cost_usd"]
        unpriced.setdefault(row["role"], [0] * len(starts))[index] += row["unpriced"]
    return {"days": labels, "roles": dict(sorted(by_role.items())),
            "unpriced": dict(sorted(unpriced.items()))}
