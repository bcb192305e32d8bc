"""Wall-clock time for schedules: which local times match a trigger, and which instant each
local time is in its zone (gaps and repeated hours of daylight saving included).

Split from schedules.py, which builds triggers on these: see its docstring for the rules.
"""

from __future__ import annotations

import bisect
import os
from datetime import UTC, date, datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import CroniterError, croniter

from taskherd.model.record import Record

MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)
# A date matching a cron/calendar entry recurs within 28 years (the weekday
# calendar repeats every 28 years between century exceptions); an entry that
# finds none in that span, such as 31 February, never fires.
_SEARCH_DAYS = 28 * 366

# --- wall-clock matching ----------------------------------------------------


class Walls(Protocol):
    def next_wall(self, after: datetime) -> datetime | None:
        """The first naive wall time strictly after ``after``, or None."""


class FieldMatcher(Record):
    """Minute/hour/day/month/weekday sets in cron's sense; None means any."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int] | None
    months: frozenset[int] | None
    weekdays: frozenset[int] | None  # 0 = Sunday

    def next_wall(self, after: datetime) -> datetime | None:
        start = after.replace(second=0, microsecond=0) + MINUTE
        day, hour, minute = start.date(), start.hour, start.minute
        try:
            for _ in range(_SEARCH_DAYS):
                if self.months is not None and day.month not in self.months:
                    day = _first_of_next_month(day)
                    hour = minute = 0
                    continue
                if self._day_matches(day):
                    found = self._first_time_from(hour, minute)
                    if found is not None:
                        return datetime(day.year, day.month, day.day, *found)
                day += DAY
                hour = minute = 0
        except (OverflowError, ValueError):  # ran past year 9999: no next fire
            pass
        return None

    def _day_matches(self, day: date) -> bool:
        day_ok = self.days is None or day.day in self.days
        weekday_ok = self.weekdays is None or day.isoweekday() % 7 in self.weekdays
        if self.days is not None and self.weekdays is not None:
            return day_ok or weekday_ok  # cron: when both are restricted, either one matches
        return day_ok and weekday_ok

    def _first_time_from(self, hour: int, minute: int) -> tuple[int, int] | None:
        for h in self.hours[bisect.bisect_left(self.hours, hour) :]:
            if h != hour:
                return h, self.minutes[0]
            i = bisect.bisect_left(self.minutes, minute)
            if i < len(self.minutes):
                return h, self.minutes[i]
        return None


def _first_of_next_month(day: date) -> date:
    return date(day.year + 1, 1, 1) if day.month == 12 else date(day.year, day.month + 1, 1)


class CroniterWalls(Record):
    """croniter's own naive iteration, for what the field matcher does not
    model (``L`` last day, ``5#2`` nth weekday); slower, so only for those."""

    expression: str

    def next_wall(self, after: datetime) -> datetime | None:
        try:
            moment: datetime = croniter(self.expression, after).get_next(datetime)
            return moment
        except CroniterError:
            return None


class IntervalWalls(Record):
    """``start``, ``start + interval``, … up to ``end`` on every local day."""

    interval: timedelta
    start: timedelta
    end: timedelta  # inclusive

    def next_wall(self, after: datetime) -> datetime | None:
        midnight = datetime.combine(after.date(), time())
        since = after - midnight
        if since < self.start:
            return midnight + self.start
        at = self.start + ((since - self.start) // self.interval + 1) * self.interval
        return midnight + at if at <= self.end else midnight + DAY + self.start


# --- wall time → instant ----------------------------------------------------


# What a wall time inside a spring-forward gap (a time the day does not have) becomes:
# schedules.DstGap names these for people; here they are plain strings.
SHIFT, SKIP, NEXT_VALID = "shift", "skip", "next_valid"


def resolve(wall: datetime, tz: ZoneInfo, both_folds: bool,
            gap: str = SHIFT) -> tuple[datetime, ...]:
    first = wall.replace(tzinfo=tz).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if first > second:
        # A time inside a spring-forward gap: fold=0 reads it with the pre-gap
        # offset, i.e. shifted forward by the gap (SHIFT); fold=1 reads it
        # with the post-gap one, an instant before the jump.
        if gap == SKIP:
            return ()
        return (gap_end(wall, tz, second, first),) if gap == NEXT_VALID else (first,)
    if first == second:
        return (first,)
    return (first, second) if both_folds else (first,)


def gap_end(wall: datetime, tz: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The jump that skips ``wall``: the first instant whose local time is past it, found
    between ``before`` (the wall read with the post-gap offset, before the jump) and
    ``after`` (read with the pre-gap offset, after it). Whole seconds: zones jump on them."""
    low, high = before, after
    while high - low > timedelta(seconds=1):
        middle = low + timedelta(seconds=(high - low).total_seconds() // 2)
        if middle.astimezone(tz).replace(tzinfo=None) > wall:
            high = middle
        else:
            low = middle
    return high


def _utcoffset(moment: datetime) -> timedelta:
    offset = moment.utcoffset()
    assert offset is not None  # an aware datetime (astimezone's) always has one
    return offset


def _offset_span(tz: ZoneInfo, instant: datetime) -> timedelta:
    """How far the zone's UTC offset moves within a day of ``instant``: zero
    except near a DST change, where wall times are not monotonic in time."""
    offsets = [_utcoffset((instant + d).astimezone(tz)) for d in (-DAY, timedelta(0), DAY)]
    return max(offsets) - min(offsets)


def _changes_within(tz: ZoneInfo, instant: datetime, span: timedelta) -> bool:
    """Whether the offset changes within ``span`` of ``instant``, the only case
    where wall times near it do not map to time in order."""
    if not span:
        return False
    offsets = {(instant + d).astimezone(tz).utcoffset() for d in (-span, timedelta(0), span)}
    return len(offsets) > 1


def next_instant(walls: Walls, tz: ZoneInfo, both_folds: bool, now: datetime,
                 gap: str = SHIFT) -> datetime | None:
    now_utc = as_utc(now)
    steady = _steady_offset(tz, now_utc)
    if steady is not None:
        # Fast path, almost every call: no offset change from a day before now
        # to `until`, so wall time and UTC differ by one constant.
        until, offset = steady
        wall = walls.next_wall((now_utc + offset).replace(tzinfo=None))
        if wall is None:
            return None
        instant = (wall - offset).replace(tzinfo=UTC)
        if instant <= until:
            return instant
    return _next_instant_near_change(walls, tz, both_folds, now_utc, gap)


def _next_instant_near_change(
    walls: Walls, tz: ZoneInfo, both_folds: bool, now_utc: datetime, gap: str
) -> datetime | None:
    # Near a DST change a wall time earlier than now's can still resolve to a
    # later instant (02:30 in the gap → 03:30 when now is 03:10; 01:15 EST
    # when now is 01:50 EDT), so start that far back and keep the minimum.
    span = _offset_span(tz, now_utc)
    cursor = now_utc.astimezone(tz).replace(tzinfo=None, fold=0)
    if _changes_within(tz, now_utc, span):
        cursor -= span
    best: datetime | None = None
    stop_at: datetime | None = None
    while True:
        wall = walls.next_wall(cursor)
        if wall is None or (stop_at is not None and wall > stop_at):
            return best
        for instant in resolve(wall, tz, both_folds, gap):
            if instant > now_utc and (best is None or instant < best):
                best = instant
        if best is not None and stop_at is None:
            span = _offset_span(tz, best)
            if not _changes_within(tz, best, span):
                return best
            stop_at = wall + span  # a later wall time can't resolve before `best` past this
        cursor = wall


# Each zone's UTC offset sampled every 6 hours over 9 days, which is safe
# because no zone has ever changed its offset twice within 6 hours. Shared by
# every trigger of the zone, so the scheduler pays for it once a week per zone,
# not once per job; near a DST change it says "not steady" just as cheaply.
_STEP = timedelta(hours=6)
_SAMPLES = 37


class _OffsetSamples(Record):
    since: datetime
    offsets: tuple[timedelta, ...]
    run_ends: tuple[int, ...]  # for each sample, the last index of its run of equal offsets

    @classmethod
    def take(cls, tz: ZoneInfo, since: datetime) -> _OffsetSamples:
        offsets = [_utcoffset((since + i * _STEP).astimezone(tz)) for i in range(_SAMPLES)]
        run_ends = [_SAMPLES - 1] * _SAMPLES
        for i in range(_SAMPLES - 2, -1, -1):
            run_ends[i] = run_ends[i + 1] if offsets[i] == offsets[i + 1] else i
        return cls(since, tuple(offsets), tuple(run_ends))

    def covers(self, now_utc: datetime) -> bool:
        return (
            self.since <= now_utc - DAY and now_utc + DAY <= self.since + (_SAMPLES - 1) * _STEP
        )

    def steady_at(self, now_utc: datetime) -> tuple[datetime, timedelta] | None:
        first = (now_utc - DAY - self.since) // _STEP  # the sample at or before now - 1 day
        last = -((self.since - now_utc - DAY) // _STEP)  # the sample at or after now + 1 day
        end = self.run_ends[first]
        return None if end < last else (self.since + end * _STEP, self.offsets[first])


_SAMPLED: dict[ZoneInfo, _OffsetSamples] = {}


def _steady_offset(tz: ZoneInfo, now_utc: datetime) -> tuple[datetime, timedelta] | None:
    """``(until, offset)`` when the offset is constant from a day before
    ``now_utc`` through ``until`` (at least a day after it), else None."""
    samples = _SAMPLED.get(tz)
    if samples is None or not samples.covers(now_utc):
        samples = _SAMPLED[tz] = _OffsetSamples.take(tz, now_utc - DAY)
    return samples.steady_at(now_utc)


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; naive datetimes are refused, never guessed."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment.isoformat()} is naive; pass an aware datetime")
    return moment.astimezone(UTC)


def local_timezone() -> str:
    """This machine's IANA zone, from $TZ or /etc/localtime; UTC if neither names one."""
    if os.environ.get("TZ", "").count("/") >= 1:
        return os.environ["TZ"].lstrip(":")
    try:
        link = os.readlink("/etc/localtime")
    except OSError:
        return "UTC"
    marker = "zoneinfo/"
    return link.split(marker, 1)[1] if marker in link else "UTC"
