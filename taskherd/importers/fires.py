"""Each source's own fire times, computed by that source's rules and not by taskherd's
scheduler, so the dry run can set them beside taskherd's and say where the move changes when
a job runs.

The calendar matching of cron, croner (OpenClaw), launchd and systemd's own reading is
croniter's, on naive wall times (it implements cron's fields, the day-of-month/day-of-week OR
rule, L and #); what each source then does with daylight saving is written out here, rule by
rule, from the source's code or documentation:

* cron (Vixie cron and cronie, src/cron.c, the main loop's "case medium" and "case
  negative"): the daemon walks minutes of the machine's zone. When the clock jumps forward it
  runs, right after the jump, each fixed-time job whose minute was skipped; a "wildcard" job
  (its minute or hour field starts with '*') is not caught up. When the clock goes back it
  runs wildcard jobs again in the repeated hour, fixed-time jobs only the first time. A line
  under CRON_TZ= is matched on each real minute converted to its own zone (cronie's
  find_jobs, whose comment warns that such jobs are "missed or run twice" at a DST change):
  a time in the gap never comes, a time in the repeated hour comes twice.
* croner (OpenClaw's cron; its README, "Proper DST handling"): a time in a gap is skipped;
  a time in a repeated hour runs once, at its first occurrence.
* launchd (the last published source, launchd-842's cronemu): the next matching wall time
  after the current one, made an instant with mktime() and tm_isdst = -1. A repeated hour is
  passed once (wall time only moves on); a time in a gap is what mktime makes of it, which
  the C standard leaves open (DR 136): read here, as glibc does, with the offset in force
  before the jump (02:30 → 03:30). Not verified on a Mac: Apple no longer publishes launchd.
* systemd: `systemd-analyze calendar` itself when the machine has it; otherwise its rules
  (checked against systemd-analyze 252): a time in a gap is skipped, a repeated hour is
  passed once.
"""

from __future__ import annotations

import heapq
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import croniter

from taskherd.policy.schedules import CRON_ALIASES, Trigger, next_fires
from taskherd.policy.walltime import gap_end

_STEP = timedelta(hours=6)  # no zone changes its offset twice within 6 hours
_AROUND = timedelta(hours=3)  # a DST change moves a fire by at most this much
_MOST_FIRES_AROUND = 1000  # per change: enough for a job every minute
_HORIZON = timedelta(days=366)  # the DST changes checked: a year's
_NEAR = (timedelta(days=-1), timedelta(0), timedelta(days=1))  # one change at most within
_BATCH = 100  # systemd-analyze iterations asked at once


class SourceRule(Protocol):
    @property
    def how(self) -> str:  # the rules that compute the fires, named for the dry run
        ...

    def fires(self, after: datetime) -> Iterator[datetime] | None:
        """The source's fires strictly after `after`, ascending (UTC-aware); None when the
        file does not say enough to know them (an interval counted from a load time)."""


@dataclass(frozen=True)
class Comparison:
    how: str
    fires: list[datetime] | None  # the source's next fires, None when they cannot be known
    why_unknown: str = ""
    differences: tuple[str, ...] = ()  # where taskherd's fires differ, said for people

    @property
    def verdict(self) -> str:
        if self.fires is None:
            return "unknown"
        return "differs" if self.differences else "same"


def compare(trigger: Trigger, rule: SourceRule, now: datetime, count: int) -> Comparison:
    """The source's next `count` fires, and every difference from taskherd's in those and
    around each DST change of the job's zone in the coming year."""
    upcoming = rule.fires(now)
    if upcoming is None:
        return Comparison(rule.how, None, getattr(rule, "why_unknown", ""))
    source = list(islice(upcoming, count))
    ours = next_fires(trigger, now, count)
    differences = [] if source == ours else [_differ("next fires", ours, source, trigger.tz)]
    for start, end in dst_changes(trigger.tz, now):
        low, high = max(now, start - _AROUND), end + _AROUND
        ours_near = _between(_trigger_fires(trigger, low), high)
        source_near = _between(rule.fires(low) or iter(()), high)
        if ours_near != source_near:
            differences.append(_differ(f"DST change of {end.astimezone(trigger.tz):%Y-%m-%d}",
                                       ours_near, source_near, trigger.tz))
    return Comparison(rule.how, source, differences=tuple(differences))


def dst_changes(tz: ZoneInfo, now: datetime) -> list[tuple[datetime, datetime]]:
    """Spans of at most 6 hours, each holding one change of the zone's offset, in a year."""
    spans, moment = [], now
    offset = moment.astimezone(tz).utcoffset()
    while moment < now + _HORIZON:
        later = moment + _STEP
        next_offset = later.astimezone(tz).utcoffset()
        if next_offset != offset:
            spans.append((moment, later))
        moment, offset = later, next_offset
    return spans


def _trigger_fires(trigger: Trigger, after: datetime) -> Iterator[datetime]:
    moment = trigger.next_after(after)
    while moment is not None:
        yield moment
        moment = trigger.next_after(moment)


def _between(fires: Iterator[datetime], until: datetime) -> list[datetime]:
    found = []
    for fire in islice(fires, _MOST_FIRES_AROUND):
        if fire > until:
            break
        found.append(fire)
    return found


def _differ(where: str, ours: list[datetime], source: list[datetime], tz: ZoneInfo) -> str:
    def show(fires: list[datetime]) -> str:
        return ", ".join(f"{f.astimezone(tz):%Y-%m-%d %H:%M %Z}" for f in fires[:4]) or "none"

    only_ours = [f for f in ours if f not in source]
    only_source = [f for f in source if f not in ours]
    if not only_ours and not only_source:  # the same instants, one of them twice
        return f"{where}: the source runs it {len(source)} times, taskherd {len(ours)}"
    return f"{where}: only taskherd {show(only_ours)}; only the source {show(only_source)}"


# --- wall times → instants, by each source's rules ----------------------------------------


def _walls(expression: str, tz: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """croniter's naive wall times from a little before `after`'s local time: near a DST
    change a wall time earlier than now's may still be a later instant."""
    start = after.astimezone(tz).replace(tzinfo=None) - _AROUND
    matches = croniter(expression, start)
    while True:
        yield matches.get_next(datetime)


def _readings(wall: datetime, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """The wall time read before and after a change (fold 0 and 1), in UTC: equal for an
    ordinary time, fold 0 later for a time in a gap, earlier for one in a repeated hour."""
    return (wall.replace(tzinfo=tz).astimezone(UTC),
            wall.replace(tzinfo=tz, fold=1).astimezone(UTC))


def _in_order(expression: str, tz: ZoneInfo, after: datetime, instants) -> Iterator[datetime]:
    """Each wall's instants (by `instants(wall)`), ascending, strictly after `after`. An
    instant is let out once no later wall can make an earlier one: a wall's instant is at
    least the wall read with the zone's largest offset near it."""
    waiting: list[datetime] = []
    for wall in _walls(expression, tz, after):
        for instant in instants(wall):
            if instant > after:
                heapq.heappush(waiting, instant)
        as_utc = wall.replace(tzinfo=UTC)
        largest = max(_utcoffset((as_utc + days).astimezone(tz)) for days in _NEAR)
        while waiting and waiting[0] <= as_utc - largest:
            yield heapq.heappop(waiting)


def _utcoffset(moment: datetime) -> timedelta:
    offset = moment.utcoffset()
    assert offset is not None  # an aware datetime (astimezone's) always has one
    return offset


def cron_wildcard(expression: str) -> bool:
    """Vixie cron's "wildcard" job: its minute or hour field starts with '*' (@hourly too)."""
    fields = CRON_ALIASES.get(expression.lower(), expression).split()
    return len(fields) >= 2 and (fields[0].startswith("*") or fields[1].startswith("*"))


@dataclass(frozen=True)
class CronRule:
    """A crontab line as cron runs it; `own_zone` when CRON_TZ= named its zone."""

    expression: str
    tz: ZoneInfo
    own_zone: bool

    @property
    def how(self) -> str:
        return ("cron's rules (cronie, a CRON_TZ line: each real minute in its zone)"
                if self.own_zone else "cron's rules (Vixie cron and cronie)")

    def fires(self, after: datetime) -> Iterator[datetime]:
        expression = CRON_ALIASES.get(self.expression.lower(), self.expression)
        wildcard = cron_wildcard(expression)

        def instants(wall: datetime) -> tuple[datetime, ...]:
            first, second = _readings(wall, self.tz)
            if first > second:  # in a gap
                if self.own_zone or wildcard:
                    return ()
                return (gap_end(wall, self.tz, second, first),)  # run right after the jump
            if first < second and (self.own_zone or wildcard):
                return first, second  # a repeated hour: matched again
            return (first,)

        return _in_order(expression, self.tz, after, instants)


@dataclass(frozen=True)
class FirstReadingRule:
    """A cron-like calendar whose time in a gap is skipped (croner, systemd) or read with
    the offset before the jump (launchd's mktime), and whose repeated hour is passed once."""

    expression: str
    tz: ZoneInfo
    how: str
    gap_skipped: bool

    def fires(self, after: datetime) -> Iterator[datetime]:
        def instants(wall: datetime) -> tuple[datetime, ...]:
            first, second = _readings(wall, self.tz)
            return () if first > second and self.gap_skipped else (first,)

        return _in_order(self.expression, self.tz, after, instants)


def croner_rule(expression: str, tz: ZoneInfo) -> FirstReadingRule:
    return FirstReadingRule(expression, tz, "croner's rules (OpenClaw's cron)", gap_skipped=True)


def launchd_rule(entries: list[dict[str, int]], tz: ZoneInfo) -> SourceRule:
    """StartCalendarInterval: any entry; a missing key is any value; weekday 7 is Sunday;
    day and weekday together: either (launchd takes the sooner of the two)."""
    rules = [FirstReadingRule(_launchd_cron(entry), tz, "launchd's calendar matching",
                              gap_skipped=False) for entry in entries]
    return AnyOf(tuple(rules), "launchd's calendar matching (StartCalendarInterval)")


def _launchd_cron(entry: dict[str, int]) -> str:
    def field(key: str) -> str:
        value = entry.get(key)
        return "*" if value is None else str(value % 7 if key == "weekday" else value)

    return " ".join(field(key) for key in ("minute", "hour", "day", "month", "weekday"))


@dataclass(frozen=True)
class AnyOf:
    rules: tuple[FirstReadingRule, ...]  # each knows its fires (no UnknownRule among them)
    how: str

    def fires(self, after: datetime) -> Iterator[datetime]:
        merged = heapq.merge(*(rule.fires(after) for rule in self.rules))
        last = None
        for fire in merged:
            if fire != last:  # two entries at one minute: launchd starts the job once
                yield fire
            last = fire


@dataclass(frozen=True)
class SystemdCalendar:
    """OnCalendar=SPEC, by `systemd-analyze calendar` when the machine has it."""

    spec: str  # with its zone named
    expression: str  # the same as cron, for the machines without systemd-analyze
    tz: ZoneInfo

    @property
    def how(self) -> str:
        return ("systemd-analyze calendar" if shutil.which("systemd-analyze")
                else "systemd's OnCalendar rules (no systemd-analyze here)")

    def fires(self, after: datetime) -> Iterator[datetime]:
        if shutil.which("systemd-analyze"):
            first = systemd_analyze(self.spec, after, _BATCH)
            if first is not None:
                return self._asked(first)
        return FirstReadingRule(self.expression, self.tz, "", gap_skipped=True).fires(after)

    def _asked(self, batch: list[datetime]) -> Iterator[datetime]:
        while batch:
            yield from batch
            batch = systemd_analyze(self.spec, batch[-1], _BATCH) or []


def systemd_analyze(spec: str, after: datetime, count: int) -> list[datetime] | None:
    """systemd's own next elapses of SPEC after `after` (None if it fails)."""
    argv = ["systemd-analyze", "calendar", f"--iterations={count}",
            f"--base-time=@{int(after.timestamp())}", "--", spec]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10,
                             env={**os.environ, "TZ": "UTC", "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.split(":", 1)[1].strip() for line in out.splitlines()
             if line.strip().startswith(("Next elapse:", "Iter. #"))]
    fires = [datetime.strptime(line, "%a %Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)
             for line in lines]
    return [fire for fire in fires if fire > after]


@dataclass(frozen=True)
class EveryRule:
    """OpenClaw's every: anchor + k·every, in real time."""

    anchor_ms: int
    every_ms: int
    how: str = "OpenClaw's every (anchorMs + k·everyMs)"

    def fires(self, after: datetime) -> Iterator[datetime]:
        now_ms = after.timestamp() * 1000
        k = max(0, int((now_ms - self.anchor_ms) // self.every_ms) + 1)
        while True:
            fire_ms = self.anchor_ms + k * self.every_ms
            if fire_ms > now_ms:
                yield datetime.fromtimestamp(fire_ms / 1000, UTC)
            k += 1


@dataclass(frozen=True)
class OnceRule:
    at: datetime
    how: str = "a one-shot"

    def fires(self, after: datetime) -> Iterator[datetime]:
        return iter([self.at] if self.at > after else [])


@dataclass(frozen=True)
class UnknownRule:
    """Fires the file alone cannot tell (an interval counted from when the job was loaded)."""

    how: str
    why_unknown: str

    def fires(self, after: datetime) -> None:
        return None
