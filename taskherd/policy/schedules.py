"""Pure schedule objects: when does a job fire next?

A trigger answers ``next_after(now)``: the first fire instant strictly after
``now``, as a **UTC-aware** datetime, or ``None`` when it will never fire
again. Nothing here reads the clock, the store or the config; time is passed
in. Kinds: ``cron``, ``calendar`` (launchd's StartCalendarInterval), ``every``
(an interval, optionally inside a daily window), ``at`` (once) and ``manual``.
Every trigger carries an IANA zone and there is no default zone: the caller
passes the daemon's zone when a job names none.

Daylight saving. Recurring triggers are computed in the naive wall-clock time
of their zone, and each wall time is then resolved to an instant:

* a wall time inside a spring-forward gap (02:30 on a day that jumps from
  02:00 to 03:00) follows the trigger's ``dst_gap`` policy (``DstGap``): by
  default it fires once, shifted forward by the length of the gap (03:30),
  which is PEP 495's ``fold=0`` reading; ``skip`` drops that day's fire (as
  systemd and croner do); ``next_valid`` fires right after the jump (03:00, as
  Vixie cron and cronie run a fixed-time job). Fires that land on one instant
  collapse into one, so "every 30 minutes" does not fire twice at 03:00;
* a wall time that happens twice on a fall-back day fires on its first
  occurrence only, except for "wildcard" schedules, which fire on both so
  that "every 15 minutes" keeps firing every 15 real minutes. Wildcard
  follows Vixie cron's rule: the cron minute or hour field starts with ``*``
  (``@hourly`` included), a calendar entry without minute or hour, and every
  ``every`` interval.

croniter parses and validates cron expressions. We do not iterate with its
timezone support: croniter 7.0 fires fixed-time jobs twice on fall-back days
("30 1 * * *" in America/New_York fires at 01:30 EDT and again at 01:30 EST;
"30 2 * * *" likewise in Europe/Berlin) and shifts spring-gap times to the
start of the gap rather than by the gap.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import field
from datetime import UTC, datetime, time, timedelta
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from taskherd.model import OverlapPolicy
from taskherd.model.record import Record
from taskherd.policy import walltime
from taskherd.policy.durations import DurationError, parse_duration
from taskherd.policy.walltime import (
    DAY,
    MINUTE,
    CroniterWalls,
    FieldMatcher,
    IntervalWalls,
    Walls,
    as_utc,
    next_instant,
    resolve,
)

_PROBE_START = datetime(2000, 1, 1)
# Below a second a job floods the queue rather than schedules it; above a day
# the per-day grid of `every` stops meaning "every" (cron says it better).
_MIN_INTERVAL, _MAX_INTERVAL = timedelta(seconds=1), DAY
_INTERVAL_ACCEPTED = "a duration from 1s to 1d such as '30m' (use cron for longer periods)"

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
CALENDAR_RANGES = {
    "minute": (0, 59),
    "hour": (0, 23),
    "day": (1, 31),
    "month": (1, 12),
    "weekday": (0, 7),
}
_CRON_ACCEPTED = "5 fields 'minute hour day month weekday' or " + ", ".join(CRON_ALIASES)
TIMEZONE_REQUIRED = "timezone is required: set [daemon] timezone or the job's timezone"


class ScheduleError(ValueError):
    """A schedule that cannot be built; the message names the field, the value
    and what would be accepted."""


class MissedFire(enum.StrEnum):
    """What to do with fires that fell due while no scheduler was running."""

    SKIP = "skip"  # drop them and only schedule forward: a stale "post the morning digest" is noise
    ONCE = "once"  # default: one catch-up fire however many were missed (anacron's behaviour)
    ALL = (
        "all"  # one fire per missed time, the newest `limit` of them: each period's report matters
    )


class DstGap(enum.StrEnum):
    """What a fixed time fires as on a day that does not have it (02:30 when clocks jump
    from 02:00 to 03:00). A repeated hour (fall-back) is not this: see the module's doc."""

    SHIFT = walltime.SHIFT  # default: once, later by the gap's length (03:30); PEP 495 fold=0
    SKIP = walltime.SKIP  # not that day: systemd's OnCalendar and croner (OpenClaw) skip it
    NEXT_VALID = walltime.NEXT_VALID  # right after the jump (03:00): Vixie cron and cronie


DEFAULT_DST_GAP = DstGap.SHIFT
DEFAULT_MISSED_FIRE = MissedFire.ONCE
DEFAULT_OVERLAP = OverlapPolicy.SKIP
# A fire this late is "missed" for MissedFire.SKIP rather than merely late: a
# scheduler tick or a slow store write must not drop an on-time fire.
DEFAULT_GRACE = timedelta(minutes=1)


# --- triggers -----------------------------------------------------------------


def _require_zone(tz: object) -> None:
    if not isinstance(tz, ZoneInfo):
        raise ScheduleError(
            TIMEZONE_REQUIRED if tz is None else f"timezone: {tz!r} is not a zoneinfo.ZoneInfo"
        )


class CronTrigger(Record):
    """A 5-field cron expression or an alias (``@daily``…), in ``tz``."""

    expression: str
    tz: ZoneInfo
    dst_gap: DstGap = DEFAULT_DST_GAP
    kind: ClassVar[str] = "cron"
    _walls: Walls = field(init=False, repr=False, compare=False)
    _both_folds: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _require_zone(self.tz)
        walls, both_folds = _compile_cron(self.expression)
        object.__setattr__(self, "_walls", walls)
        object.__setattr__(self, "_both_folds", both_folds)

    def next_after(self, now: datetime) -> datetime | None:
        return next_instant(self._walls, self.tz, self._both_folds, now, self.dst_gap)

    def to_spec(self) -> dict[str, object]:
        return {"cron": self.expression, "timezone": self.tz.key, **_gap_spec(self.dst_gap)}


# Compiled walls are immutable, so jobs sharing an expression share them;
# croniter's parse is most of a trigger's build cost and the scheduler
# rebuilds triggers from stored specs on every load.
def _compile_cron(expression: object) -> tuple[Walls, bool]:
    if not isinstance(expression, str):  # checked before the cache, which needs a hashable key
        raise _bad("cron", expression, "is not a cron expression", _CRON_ACCEPTED)
    return _compile_cron_text(expression)


@functools.lru_cache(maxsize=4096)
def _compile_cron_text(expression: str) -> tuple[Walls, bool]:
    if not expression.strip():
        raise _bad("cron", expression, "is not a cron expression", _CRON_ACCEPTED)
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() not in CRON_ALIASES:
            raise _bad("cron", expression, "is not a known alias", ", ".join(CRON_ALIASES))
        text = CRON_ALIASES[text.lower()]
    fields = text.split(" ")
    if len(fields) != 5:
        raise _bad(
            "cron",
            expression,
            f"has {len(fields)} fields",
            "exactly 5: minute hour day month weekday (no seconds or year field)",
        )
    try:
        expanded, nth_weekday = croniter.expand(text)
    except CroniterError as exc:
        raise _bad(
            "cron",
            expression,
            f"is invalid ({exc})",
            "5 fields 'minute hour day month weekday', e.g. '*/5 * * * *'",
        ) from exc
    both_folds = fields[0].startswith("*") or fields[1].startswith("*")
    walls: Walls
    if nth_weekday or any(v == "l" for values in expanded for v in values):
        walls = CroniterWalls(text)
    else:
        walls = _fields_matcher(*expanded)
    if walls.next_wall(_PROBE_START) is None:
        raise _bad("cron", expression, "never matches a date", "a day that exists, e.g. not 31 2")
    return walls, both_folds


def _fields_matcher(
    minutes: list[Any], hours: list[Any], days: list[Any], months: list[Any],
    weekdays: list[Any]
) -> FieldMatcher:
    def any_or(values: list[Any]) -> frozenset[int] | None:
        return None if values == ["*"] else frozenset(values)

    return FieldMatcher(
        minutes=tuple(range(60)) if minutes == ["*"] else tuple(sorted(minutes)),
        hours=tuple(range(24)) if hours == ["*"] else tuple(sorted(hours)),
        days=any_or(days),
        months=any_or(months),
        weekdays=any_or(weekdays),
    )


class CalendarEntry(Record):
    """One launchd StartCalendarInterval dict; a missing key means any value,
    as in launchd (so ``hour=9`` alone fires every minute from 09:00 to 09:59)."""

    minute: int | None = None
    hour: int | None = None
    day: int | None = None
    month: int | None = None
    weekday: int | None = None  # 0 or 7 = Sunday, as in launchd and cron

    def matcher(self) -> FieldMatcher:
        def one(value: int | None) -> frozenset[int] | None:
            return None if value is None else frozenset({value})

        return FieldMatcher(
            minutes=tuple(range(60)) if self.minute is None else (self.minute,),
            hours=tuple(range(24)) if self.hour is None else (self.hour,),
            days=one(self.day),
            months=one(self.month),
            weekdays=None if self.weekday is None else frozenset({self.weekday % 7}),
        )

    def to_spec(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in CALENDAR_RANGES if getattr(self, k) is not None}


class CalendarTrigger(Record):
    """Fires whenever any entry matches (launchd semantics; when both day and
    weekday are set, either matches, as in cron and launchd)."""

    entries: tuple[CalendarEntry, ...]
    tz: ZoneInfo
    dst_gap: DstGap = DEFAULT_DST_GAP
    kind: ClassVar[str] = "calendar"
    _compiled: tuple[tuple[FieldMatcher, bool], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _require_zone(self.tz)
        object.__setattr__(self, "entries", tuple(self.entries))  # a list would break hashing
        if not self.entries:
            raise _bad(
                "calendar",
                [],
                "has no entries",
                "a list of {minute, hour, weekday, day, "
                "month} tables, e.g. [{hour = 9, minute = 0}]",
            )
        compiled = []
        for i, entry in enumerate(self.entries):
            _check_entry(f"calendar[{i}]", entry.to_spec())
            compiled.append((entry.matcher(), entry.minute is None or entry.hour is None))
        object.__setattr__(self, "_compiled", tuple(compiled))

    def next_after(self, now: datetime) -> datetime | None:
        fires = [next_instant(m, self.tz, both, now, self.dst_gap) for m, both in self._compiled]
        return min((f for f in fires if f is not None), default=None)

    def to_spec(self) -> dict[str, object]:
        return {"calendar": [e.to_spec() for e in self.entries], "timezone": self.tz.key,
                **_gap_spec(self.dst_gap)}


def _check_entry(where: str, entry: object) -> None:
    accepted = ", ".join(CALENDAR_RANGES)
    if not isinstance(entry, dict):
        raise _bad(where, entry, "is not a table", f"a table with keys {accepted}")
    if not entry:
        raise _bad(
            where,
            entry,
            "is empty and would fire every minute",
            "at least one of " + accepted + " (use cron '* * * * *' for every minute)",
        )
    for key, value in entry.items():
        if key not in CALENDAR_RANGES:
            raise _bad(where, key, "is not a calendar key", f"lowercase {accepted}")
        low, high = CALENDAR_RANGES[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _bad(f"{where}.{key}", value, "is out of range", f"an integer {low}-{high}")
    probe = CalendarEntry(**entry).matcher()
    if probe.next_wall(_PROBE_START) is None:
        raise _bad(where, entry, "never matches a date", "a day that exists in that month")


class Window(Record):
    """A daily span of wall time, both ends inclusive; it may not cross midnight."""

    start: time
    end: time

    def __post_init__(self) -> None:
        if self.start >= self.end:
            why = (
                "is empty"
                if self.start == self.end
                else "ends before it starts (windows may not cross midnight; use two jobs)"
            )
            raise _bad(
                "window",
                self.to_spec(),
                why,
                "'HH:MM-HH:MM' with start before end, e.g. '08:00-22:30'",
            )

    def to_spec(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"


class EveryTrigger(Record):
    """Every ``interval`` of wall time from ``window.start`` to ``window.end``
    (inclusive) each local day, or from local midnight through the day when
    there is no window: "every 30m, 08:00-22:30" fires 08:00, 08:30 … 22:30.
    The grid restarts at each day's start, so an interval that does not divide
    the day (7h) fires 00:00, 07:00, 14:00, 21:00, then 00:00 again."""

    interval: timedelta
    tz: ZoneInfo
    window: Window | None = None
    dst_gap: DstGap = DEFAULT_DST_GAP
    kind: ClassVar[str] = "every"
    _walls: IntervalWalls = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _require_zone(self.tz)
        if not isinstance(self.interval, timedelta) or not (
            _MIN_INTERVAL <= self.interval <= _MAX_INTERVAL
        ):
            raise _bad("every", _text(self.interval), "is out of range", _INTERVAL_ACCEPTED)
        if self.window is None:
            walls = IntervalWalls(self.interval, timedelta(0), DAY - timedelta(microseconds=1))
        else:
            walls = IntervalWalls(
                self.interval, _since_midnight(self.window.start), _since_midnight(self.window.end)
            )
        object.__setattr__(self, "_walls", walls)

    def next_after(self, now: datetime) -> datetime | None:
        return next_instant(self._walls, self.tz, True, now, self.dst_gap)

    def to_spec(self) -> dict[str, object]:
        spec: dict[str, object] = {"every": _text(self.interval), "timezone": self.tz.key}
        if self.window is not None:
            spec["window"] = self.window.to_spec()
        return spec | _gap_spec(self.dst_gap)


def _gap_spec(policy: DstGap) -> dict[str, str]:
    # The default is left out, so every job stored before dst_gap existed keeps its spec
    # (a config sync compares specs: an added default key would rewrite every job).
    return {} if policy is DEFAULT_DST_GAP else {"dst_gap": policy.value}


def _since_midnight(moment: time) -> timedelta:
    return timedelta(hours=moment.hour, minutes=moment.minute, seconds=moment.second)


def _text(interval: object) -> object:
    return f"{interval.total_seconds():g}s" if isinstance(interval, timedelta) else interval


class AtTrigger(Record):
    """Fires once, at ``at`` (stored in UTC); afterwards ``next_after`` is None."""

    at: datetime
    tz: ZoneInfo
    kind: ClassVar[str] = "at"

    def __post_init__(self) -> None:
        _require_zone(self.tz)
        object.__setattr__(self, "at", as_utc(self.at))

    def next_after(self, now: datetime) -> datetime | None:
        return self.at if self.at > as_utc(now) else None

    def to_spec(self) -> dict[str, object]:
        return {"at": self.at.astimezone(self.tz).isoformat(), "timezone": self.tz.key}


class ManualTrigger(Record):
    """Never fires by itself; tasks come from ``taskherd jobs run``."""

    tz: ZoneInfo
    kind: ClassVar[str] = "manual"

    def __post_init__(self) -> None:
        _require_zone(self.tz)

    def next_after(self, now: datetime) -> datetime | None:
        as_utc(now)  # a naive `now` is a bug in the caller even when the answer is None
        return None

    def to_spec(self) -> dict[str, object]:
        return {"timezone": self.tz.key}


Trigger = CronTrigger | CalendarTrigger | EveryTrigger | AtTrigger | ManualTrigger


# --- using triggers -----------------------------------------------------------


def next_fires(trigger: Trigger, now: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire instants after ``now`` (fewer if it stops), for
    ``taskherd jobs next``."""
    fires: list[datetime] = []
    moment: datetime | None = now
    while len(fires) < count and moment is not None:
        moment = trigger.next_after(moment)
        if moment is not None:
            fires.append(moment)
    return fires


def due_fires(
    trigger: Trigger,
    last_scheduled: datetime,
    now: datetime,
    policy: MissedFire,
    limit: int,
    *,
    grace: timedelta = DEFAULT_GRACE,
) -> list[datetime]:
    """The fire times to create tasks for now, oldest first.

    ``last_scheduled`` is the job's stored ``next_run_at``: the earliest fire
    not yet created, itself due when it is not after ``now``. Due fires are it
    and every later fire up to ``now``. ``SKIP`` keeps only a fire late by at
    most ``grace`` (an on-time tick, not a catch-up); ``ONCE`` keeps the newest
    due fire; ``ALL`` keeps the newest ``limit``. Store
    ``trigger.next_after(now)`` as the job's new ``next_run_at``.
    """
    policy = MissedFire(policy)  # "all" from the store must not fall through as "not ALL"
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    now_utc, first = as_utc(now), as_utc(last_scheduled)
    if first > now_utc:
        return []
    due = _newest_fires(trigger, first, now_utc, limit if policy is MissedFire.ALL else 1)
    if policy is MissedFire.SKIP:
        return [fire for fire in due if now_utc - fire <= grace]
    return due


def _newest_fires(trigger: Trigger, first: datetime, now: datetime, count: int) -> list[datetime]:
    # Look back over a doubling window instead of walking from `first`: after
    # a week down, a per-minute job would otherwise cost 10,000 steps to keep one.
    window = MINUTE
    while True:
        lower = now - window
        if lower <= first:
            return ([first] + _fires_between(trigger, first, now))[-count:]
        fires = _fires_between(trigger, lower, now)
        if len(fires) >= count:
            return fires[-count:]
        window *= 2


def _fires_between(trigger: Trigger, after: datetime, until: datetime) -> list[datetime]:
    fires: list[datetime] = []
    moment = trigger.next_after(after)
    while moment is not None and moment <= until:
        fires.append(moment)
        moment = trigger.next_after(moment)
    return fires


# --- parsing job tables -------------------------------------------------------


_KINDS = ("cron", "calendar", "every", "at", "manual")


def parse_trigger(spec: dict[str, Any], default_tz: str | None) -> Trigger:
    """Build a trigger from a job table (``taskherd.toml`` ``[[jobs]]`` or the CLI).

    Reads ``cron``, ``calendar``, ``every`` + ``window``, ``at``, ``manual``,
    ``timezone`` and ``dst_gap``; other keys of the job table are left to the config.
    No trigger key means a manual job. ``default_tz`` is the daemon's zone.
    """
    kinds = [k for k in _KINDS if k in spec]
    if len(kinds) > 1:
        raise _bad(
            "trigger",
            " and ".join(kinds),
            "are set together",
            "exactly one of " + ", ".join(_KINDS),
        )
    if "window" in spec and kinds != ["every"]:
        raise _bad(
            "window",
            spec["window"],
            "only applies to 'every'",
            "'every' together with 'window', e.g. every = '30m', window = '08:00-22:30'",
        )
    tz = parse_zone(spec.get("timezone"), default_tz)
    kind = kinds[0] if kinds else "manual"
    gap = _parse_dst_gap(spec.get("dst_gap"), kind)
    if kind == "cron":
        return CronTrigger(spec["cron"], tz, gap)
    if kind == "calendar":
        return CalendarTrigger(_parse_calendar(spec["calendar"]), tz, gap)
    if kind == "every":
        return EveryTrigger(_parse_interval(spec["every"]), tz, _parse_window(spec.get("window")),
                            gap)
    if kind == "at":
        return AtTrigger(_parse_at(spec["at"], tz), tz)
    if spec.get("manual", True) is not True:
        raise _bad("manual", spec["manual"], "is not true", "manual = true, or no trigger key")
    return ManualTrigger(tz)


def _parse_dst_gap(value: object, kind: str) -> DstGap:
    accepted = ", ".join(policy.value for policy in DstGap)
    if value is None:
        return DEFAULT_DST_GAP
    if kind not in ("cron", "calendar", "every"):
        raise _bad("dst_gap", value, f"does not apply to {kind!r}",
                   "dst_gap with cron, calendar or every (an 'at' time is read as written)")
    try:
        return DstGap(str(value))
    except ValueError:
        raise _bad("dst_gap", value, "is not a policy", accepted) from None


def parse_zone(job_tz: object, default_tz: str | None) -> ZoneInfo:
    """The job's zone, else the daemon's; neither is an error, never UTC by accident."""
    name, where = (job_tz, "timezone") if job_tz is not None else (default_tz, "[daemon] timezone")
    if name is None or name == "":
        raise ScheduleError(TIMEZONE_REQUIRED)
    accepted = "an IANA zone name such as 'Europe/Paris', 'America/New_York' or 'UTC'"
    if not isinstance(name, str):
        raise _bad(where, name, "is not a zone name", accepted)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:  # ValueError: paths such as '../x'
        raise _bad(where, name, "is not a known time zone", accepted) from exc


def _parse_calendar(value: object) -> tuple[CalendarEntry, ...]:
    entries = [value] if isinstance(value, dict) else value  # launchd takes one dict or a list
    if not isinstance(entries, list) or not entries:
        raise _bad(
            "calendar",
            value,
            "is not a list of tables",
            "e.g. calendar = [{hour = 9, minute = 0, weekday = 1}]",
        )
    for i, entry in enumerate(entries):
        _check_entry(f"calendar[{i}]", entry)
    return tuple(CalendarEntry(**entry) for entry in entries)


def _parse_interval(value: object) -> timedelta:
    try:
        seconds = parse_duration(value, field="every")
    except DurationError as exc:
        raise ScheduleError(str(exc)) from exc
    interval = timedelta(seconds=seconds)
    if seconds <= 0:
        raise _bad("every", value, "is not positive", _INTERVAL_ACCEPTED)
    if not _MIN_INTERVAL <= interval <= _MAX_INTERVAL:
        raise _bad("every", value, "is out of range", _INTERVAL_ACCEPTED)
    return interval


def _parse_window(value: object) -> Window | None:
    if value is None:
        return None
    accepted = "'HH:MM-HH:MM' within one day, e.g. '08:00-22:30'"
    parts = value.replace("–", "-").split("-") if isinstance(value, str) else []
    if len(parts) != 2:
        raise _bad("window", value, "is not a time range", accepted)
    try:
        start, end = (time.fromisoformat(_pad(p.strip())) for p in parts)
    except ValueError as exc:
        raise _bad("window", value, "is not a time range", accepted) from exc
    return Window(start, end)


def _pad(clock: str) -> str:
    return "0" + clock if len(clock.split(":")[0]) == 1 else clock  # "8:00" → "08:00"


def _parse_at(value: object, tz: ZoneInfo) -> datetime:
    accepted = "an ISO date-time such as '2026-12-01T09:00' (read in the job's timezone)"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise _bad("at", value, "is not a date-time", accepted) from exc
    if not isinstance(value, datetime):
        raise _bad("at", value, "is not a date-time", accepted)
    if value.tzinfo is None:
        return resolve(value, tz, both_folds=False)[0]
    return value


def _bad(field_name: str, value: object, why: str, accepted: str) -> ScheduleError:
    return ScheduleError(f"{field_name}: {value!r} {why}; accepted: {accepted}")


def schedule_start(trigger: Trigger, now: float) -> float | None:
    """The first fire of `trigger` after `now`, as unix seconds (for enable and upsert)."""
    following = trigger.next_after(datetime.fromtimestamp(now, UTC))
    return following.timestamp() if following else None
