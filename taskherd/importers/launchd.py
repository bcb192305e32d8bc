"""A launchd job (a plist, XML or binary, read with the standard library's plistlib).

`ProgramArguments` (or `Program`) becomes a `command` role run with that argv as given, with
`EnvironmentVariables` and `WorkingDirectory`; `StartCalendarInterval` (a dict or a list of
dicts; a missing key is any value, as launchd reads it) becomes a calendar job, the
scheduler's own launchd trigger; `StartInterval` an `every` job.
"""

from __future__ import annotations

import plistlib
from typing import Any
from xml.parsers.expat import ExpatError

from taskherd.importers.fires import SourceRule, UnknownRule, launchd_rule
from taskherd.importers.model import (
    Dropped,
    Imported,
    ImportedJob,
    ImportedRole,
    ImportError_,
    build_trigger,
    interval_notes,
    job_name,
    role_name,
)

_CALENDAR_KEYS = {"Minute": "minute", "Hour": "hour", "Day": "day", "Month": "month",
                  "Weekday": "weekday"}
_READ = {"Label", "Program", "ProgramArguments", "StartCalendarInterval", "StartInterval",
         "EnvironmentVariables", "WorkingDirectory", "Disabled"}
_WHY = {
    "RunAtLoad": "taskherd jobs fire on their schedule, not when a daemon starts "
                 "(`taskherd jobs run NAME` fires one by hand)",
    "StandardOutPath": "taskherd keeps each run's output in its run log (`taskherd runs log`)",
    "StandardErrorPath": "taskherd keeps each run's output in its run log (`taskherd runs log`)",
    "KeepAlive": "taskherd runs tasks to completion; a service that must stay up is not a job",
}


def parse(file: str, data: bytes, default_tz: str | None) -> Imported:
    try:
        plist = plistlib.loads(data)
    except (plistlib.InvalidFileException, ExpatError, ValueError, TypeError) as error:
        raise ImportError_(file, None, "plist", f"not a readable plist ({error})") from None
    if not isinstance(plist, dict):
        raise ImportError_(file, None, "plist", "expected a dictionary at the top")
    label = plist.get("Label")
    if not isinstance(label, str) or not label:
        raise ImportError_(file, None, "Label", "missing: launchd needs a Label naming the job")
    role = ImportedRole(role_name("launchd", label), _role_table(file, label, plist))
    result = Imported()
    for key in sorted(set(plist) - _READ):
        result.dropped.append(Dropped(file, label, key, _WHY.get(key, "not a scheduling "
                                                                 "field taskherd reads")))
    base = {"role": role.name, "title": label, "prompt": "",
            "enabled": plist.get("Disabled") is not True}
    triggers: list[tuple[str, dict[str, Any], tuple[str, ...], str]] = []
    if "StartCalendarInterval" in plist:
        calendar = plist["StartCalendarInterval"]
        # launchd's own gap rule is not documented (see importers/fires.py): taskherd's
        # default, the time read with the offset before the jump, as mktime() reads it.
        triggers.append(("", {"calendar": _calendar(file, label, calendar), "dst_gap": "shift"},
                         (), f"StartCalendarInterval {calendar!r}"))
    if "StartInterval" in plist:
        seconds = plist["StartInterval"]
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
            raise ImportError_(file, label, "StartInterval", f"{seconds!r} is not a whole "
                               "number of seconds ≥ 1")
        triggers.append((".interval" if triggers else "", {"every": f"{seconds}s"},
                         interval_notes(seconds, "StartInterval counts from when launchd "
                                                 "loaded the job"), f"StartInterval {seconds}"))
    if not triggers:
        triggers.append(("", {"manual": True}, (("no schedule in the plist: a manual job, "
                                                "fired by `taskherd jobs run`"),), "none"))
    for suffix, trigger_keys, notes, rule in triggers:
        table = {"name": job_name("launchd", label + suffix), **base, **trigger_keys}
        trigger = build_trigger(file, label, table, default_tz)
        result.jobs.append(ImportedJob(label + suffix, table, trigger, role,
                                       notes=(f"runs {role.table['command']!r} as given", *notes),
                                       rule=rule, source_rule=_source_rule(table, trigger)))
    return result


def _source_rule(table: dict[str, Any], trigger: Any) -> SourceRule:
    if "calendar" in table:
        return launchd_rule(table["calendar"], trigger.tz)
    if "every" in table:
        return UnknownRule("launchd's StartInterval", "launchd counts StartInterval from when "
                           "it loaded the job, which the plist does not say")
    return UnknownRule("none", "no schedule in the plist")


def _role_table(file: str, label: str, plist: dict[str, Any]) -> dict[str, Any]:
    argv = plist.get("ProgramArguments")
    if argv is None and isinstance(plist.get("Program"), str):
        argv = [plist["Program"]]
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ImportError_(file, label, "ProgramArguments", "expected a non-empty list of "
                           "strings (or a Program string)")
    table: dict[str, Any] = {"runtime": "command", "command": argv}
    env = plist.get("EnvironmentVariables")
    if env is not None:
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ImportError_(file, label, "EnvironmentVariables", "expected a dictionary "
                               "of strings")
        table["env"] = dict(env)
    workdir = plist.get("WorkingDirectory")
    if workdir is not None:
        if not isinstance(workdir, str):
            raise ImportError_(file, label, "WorkingDirectory", "expected a path string")
        table["workdir"] = workdir
    return table


def _calendar(file: str, label: str, value: Any) -> list[dict[str, int]]:
    entries = [value] if isinstance(value, dict) else value
    if not isinstance(entries, list) or not entries:
        raise ImportError_(file, label, "StartCalendarInterval", "expected a dictionary or a "
                           "list of dictionaries")
    calendar = []
    for index, entry in enumerate(entries):
        where = f"StartCalendarInterval[{index}]"
        if not isinstance(entry, dict):
            raise ImportError_(file, label, where, "expected a dictionary")
        unknown = sorted(set(entry) - set(_CALENDAR_KEYS))
        if unknown:
            raise ImportError_(file, label, f"{where}.{unknown[0]}", "not a calendar key "
                               f"(accepted: {', '.join(_CALENDAR_KEYS)})")
        calendar.append({_CALENDAR_KEYS[k]: v for k, v in entry.items()})
    return calendar
