"""A systemd timer and its service (`NAME.timer` with `NAME.service`, or the timer's Unit=).

`OnCalendar=` becomes a cron job when taskherd's cron can say it (else it is named as
unsupported); `OnUnitActiveSec=` an `every` (`OnBootSec=` beside it is named as dropped);
`Persistent=true` the missed-fire policy `once` (systemd runs a missed timer once when it
can), otherwise `skip`; the service's `ExecStart=` the argv of a `command` role.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePath
from typing import Any

from taskherd.importers.fires import SourceRule, SystemdCalendar, UnknownRule
from taskherd.importers.model import (
    Dropped,
    Imported,
    ImportedJob,
    ImportedRole,
    ImportError_,
    build_trigger,
    decode_text,
    interval_notes,
    job_name,
    role_name,
)

_SHORTHANDS = {
    "minutely": "*-*-* *:*:00", "hourly": "*-*-* *:00:00", "daily": "*-*-* 00:00:00",
    "weekly": "Mon *-*-* 00:00:00", "monthly": "*-*-01 00:00:00", "yearly": "*-01-01 00:00:00",
    "annually": "*-01-01 00:00:00", "quarterly": "*-01,04,07,10-01 00:00:00",
    "semiannually": "*-01,07-01 00:00:00",
}
_SPAN_UNITS = {"us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1, "sec": 1,
               "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
               "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
               "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}
_TIMER_READ = {"OnCalendar", "OnUnitActiveSec", "OnBootSec", "Persistent", "Unit"}
_SERVICE_READ = {"ExecStart", "Environment", "WorkingDirectory", "Type", "Description"}


class Unsupported(ValueError):
    """An OnCalendar= taskherd's cron cannot say."""


def parse(files: dict[str, bytes], default_tz: str | None) -> Imported:
    """Every `.timer` among `files` with its service (found among `files` by name)."""
    units = {PurePath(name).name: (name, _sections(name, data)) for name, data in files.items()}
    timers = [name for name in units if name.endswith(".timer")]
    if not timers:
        raise ImportError_(", ".join(files), None, "timer", "no .timer file given")
    result = Imported()
    for timer in sorted(timers):
        file, sections = units[timer]
        result.extend(_timer(file, timer, sections, units, default_tz))
    return result


def _timer(file: str, timer: str, sections: dict[str, dict[str, list[str]]],
           units: dict[str, Any], default_tz: str | None) -> Imported:
    result = Imported()
    settings = sections.get("Timer", {})
    unit = (settings.get("Unit") or [timer.removesuffix(".timer") + ".service"])[-1]
    if unit not in units:
        raise ImportError_(file, timer, "Unit", f"{unit} was not given: pass the timer and its "
                           "service together")
    service_file, service = units[unit][0], units[unit][1].get("Service", {})
    role = ImportedRole(role_name("systemd", unit.removesuffix(".service")),
                        _role_table(service_file, unit, service))
    for key in sorted(set(settings) - _TIMER_READ):
        result.dropped.append(Dropped(file, timer, key, "not a schedule field taskherd reads"))
    for key in sorted(set(service) - _SERVICE_READ):
        result.dropped.append(Dropped(service_file, unit, key, "set it on the role in "
                                      "taskherd.toml if it matters"))
    persistent = (settings.get("Persistent") or ["false"])[-1].lower() in ("true", "yes", "1", "on")
    base = {"role": role.name, "title": timer.removesuffix(".timer"), "prompt": "",
            "missed_fire": "once" if persistent else "skip"}
    name = timer.removesuffix(".timer")
    triggers: list[tuple[dict[str, Any], str, tuple[str, ...]]] = []
    for spec in settings.get("OnCalendar", []):
        try:
            # systemd skips a time the day does not have (systemd-analyze calendar shows it).
            triggers.append((to_cron(spec) | {"dst_gap": "skip"}, f"OnCalendar={spec}", ()))
        except Unsupported as why:
            result.dropped.append(Dropped(file, timer, f"OnCalendar={spec}", f"unsupported: {why}"))
    active = settings.get("OnUnitActiveSec")
    if active:
        seconds = _span(file, timer, "OnUnitActiveSec", active[-1])
        triggers.append(({"every": f"{seconds:g}s"}, f"OnUnitActiveSec={active[-1]}",
                         interval_notes(seconds, "systemd counts from the service's last start")))
    if settings.get("OnBootSec"):
        result.dropped.append(Dropped(file, timer, "OnBootSec", "taskherd has no boot: "
                                      + ("the interval runs from each local midnight" if active
                                         else "a timer that fires only after boot is not a job")))
    for index, (keys, rule, notes) in enumerate(triggers):
        table = {"name": job_name("systemd", name + (f".{index + 1}" if index else "")),
                 **base, **keys}
        trigger = build_trigger(file, timer, table, default_tz)
        result.jobs.append(ImportedJob(name, table, trigger, role,
                                       notes=(f"runs {role.table['command']!r} as given", *notes),
                                       rule=rule, source_rule=_source_rule(rule, table, trigger)))
    return result


def _source_rule(rule: str, table: dict[str, Any], trigger: Any) -> SourceRule:
    if "cron" not in table:
        return UnknownRule("systemd's OnUnitActiveSec", "systemd counts it from the service's "
                           "last start, which the unit files do not say")
    spec = rule.removeprefix("OnCalendar=").strip()
    if "timezone" not in table:  # systemd reads it in the machine's zone: the daemon's here
        spec = f"{_SHORTHANDS.get(spec.lower(), spec)} {trigger.tz.key}"
    return SystemdCalendar(spec, table["cron"], trigger.tz)


def to_cron(spec: str) -> dict[str, str]:
    """An OnCalendar= expression as a 5-field cron expression and, if named, its zone."""
    text = _SHORTHANDS.get(spec.strip().lower(), spec.strip())
    words = text.split()
    zone = None
    if words and ("/" in words[-1] or words[-1] == "UTC") and ":" not in words[-1]:
        zone = words.pop()
    weekdays = "*"
    if words and re.fullmatch(r"[A-Za-z.,]+", words[0]):
        weekdays = _weekdays(words.pop(0))
    date, clock = "*-*-*", "00:00:00"
    for word in words:
        if ":" in word:
            clock = word
        elif "-" in word:
            date = word
        else:
            raise Unsupported(f"{word!r} is neither a date nor a time")
    day, month = _date(date)
    minute, hour = _clock(clock)
    if day != "*" and weekdays != "*":
        raise Unsupported("a weekday and a day together must both match in systemd; in cron "
                          "either does")
    cron = {"cron": f"{minute} {hour} {day} {month} {weekdays}"}
    if zone is not None:
        cron["timezone"] = zone
    return cron


def _weekdays(word: str) -> str:
    names = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
    parts = []
    for part in word.lower().split(","):
        ends = part.split("..")
        if not all(end[:3] in names for end in ends) or len(ends) > 2:
            raise Unsupported(f"{word!r} is not a weekday list")
        parts.append("-".join(end[:3] for end in ends))
    return ",".join(parts)


def _date(date: str) -> tuple[str, str]:
    parts = date.split("-")
    if len(parts) == 2:
        parts.insert(0, "*")
    if len(parts) != 3 or "~" in date:
        raise Unsupported(f"{date!r}: only *-MM-DD dates (no last-day '~')")
    year, month, day = parts
    if year != "*":
        raise Unsupported(f"{date!r} names a year; cron repeats every year")
    return _field(day, 1, 31), _field(month, 1, 12)


def _clock(clock: str) -> tuple[str, str]:
    parts = clock.split(":")
    if len(parts) == 2:
        parts.append("00")
    if len(parts) != 3:
        raise Unsupported(f"{clock!r} is not HH:MM[:SS]")
    hour, minute, second = parts
    if second not in ("0", "00"):
        raise Unsupported(f"{clock!r} fires at a second other than 0; cron counts minutes")
    return _field(minute, 0, 59), _field(hour, 0, 23)


def _field(text: str, low: int, high: int) -> str:
    out = []
    for part in text.split(","):
        start, slash, step = part.partition("/")
        if not re.fullmatch(r"\*|\d+(\.\.\d+)?", start) or (slash and not step.isdigit()):
            raise Unsupported(f"{text!r} is not a list of numbers, ranges and repetitions")
        start = start.replace("..", "-")
        if slash and start != "*" and "-" not in start:
            # systemd's 0/15 repeats to the end, cron's needs a range
            start = f"{int(start)}-{high}"
        out.append(start + (f"/{step}" if slash else ""))
    return ",".join(out)


def _span(file: str, timer: str, key: str, text: str) -> float:
    total, found = 0.0, False
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip()):
        if unit not in _SPAN_UNITS and unit != "":
            raise ImportError_(file, timer, key, f"{text!r}: unknown unit {unit!r}")
        total += float(number) * _SPAN_UNITS.get(unit, 1)
        found = True
    if not found or total <= 0:
        raise ImportError_(file, timer, key, f"{text!r} is not a time span such as '15min'")
    return total


def _role_table(file: str, unit: str, service: dict[str, list[str]]) -> dict[str, Any]:
    starts = service.get("ExecStart") or []
    if len(starts) != 1:
        raise ImportError_(file, unit, "ExecStart", "expected exactly one command line "
                           f"(found {len(starts)})")
    try:
        argv = shlex.split(starts[0].lstrip("-@+!:"))
    except ValueError as error:
        raise ImportError_(file, unit, "ExecStart", f"cannot split it: {error}") from None
    if not argv:
        raise ImportError_(file, unit, "ExecStart", "is empty")
    table: dict[str, Any] = {"runtime": "command", "command": argv}
    env = {}
    for line in service.get("Environment", []):
        for pair in shlex.split(line):
            key, sep, value = pair.partition("=")
            if not sep:
                raise ImportError_(file, unit, "Environment", f"{pair!r} is not NAME=value")
            env[key] = value
    if env:
        table["env"] = env
    if service.get("WorkingDirectory"):
        table["workdir"] = service["WorkingDirectory"][-1]
    return table


def _sections(file: str, data: bytes) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(decode_text(file, data).splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if not sep or current is None:
            raise ImportError_(file, f"line {number}", "unit", f"{line!r} is not KEY=value "
                               "inside a [Section]")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections
