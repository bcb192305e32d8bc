"""A crontab (a file, or `crontab -l` on stdin) as cron reads it.

Each schedule line is a job; each distinct command (with the variables in force above it) a
`command` role running `[SHELL or "sh", "-c", COMMAND]`: cron hands every command line to a
shell, so the role does too, and the dry run says so. Variable lines set the environment of
the lines below; CRON_TZ= (or TZ=) their zone. A `%` ends the command and the text after it
is the command's stdin (further `%` become newlines; `\\%` is a literal `%`): here it is the
task's prompt, which the command role writes on stdin.
"""

from __future__ import annotations

import re
from typing import Any

from taskherd.importers.fires import CronRule, cron_wildcard
from taskherd.importers.model import (
    Dropped,
    Imported,
    ImportedJob,
    ImportedRole,
    ImportError_,
    build_trigger,
    decode_text,
    digest,
    job_name,
    role_name,
)
from taskherd.policy.schedules import ScheduleError, parse_zone

_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)")
_ZONE_VARIABLES = ("CRON_TZ", "TZ")
_MAIL = ("MAILTO", "MAILFROM")


def parse(file: str, data: bytes, default_tz: str | None) -> Imported:
    result = Imported()
    env: dict[str, str] = {}
    shell, zone = "sh", None
    for number, raw in enumerate(decode_text(file, data).splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"line {number}"
        variable = _VARIABLE.fullmatch(line)
        if variable:
            name, value = variable.group(1), _unquote(variable.group(2).strip())
            if name in _ZONE_VARIABLES:
                zone = _zone(file, where, name, value)
            elif name in _MAIL:
                result.dropped.append(Dropped(file, where, name, "cron mails a job's output; "
                                              "taskherd keeps it in the run log (deliver_to "
                                              "tells an alias when a task settles)"))
            elif name == "SHELL":
                shell = value
            else:
                env[name] = value
            continue
        job = _job(file, where, line, env, shell, zone, default_tz, result)
        if job is not None:
            result.jobs.append(job)
    return result


def _job(file: str, where: str, line: str, env: dict[str, str], shell: str, zone: str | None,
         default_tz: str | None, result: Imported) -> ImportedJob | None:
    if line.startswith("@"):
        macro, _, command = line.partition(" ")
        if macro.lower() == "@reboot":
            result.dropped.append(Dropped(file, where, "@reboot", "unsupported: taskherd jobs "
                                          "fire on a schedule, not when the machine starts"))
            return None
        schedule = macro
    else:
        fields = line.split(None, 5)
        if len(fields) < 6:
            raise ImportError_(file, where, "schedule", f"{line!r} is not a cron line: expected "
                               "five time fields and a command, a macro such as @daily, or "
                               "NAME=value")
        schedule, command = " ".join(fields[:5]), fields[5]
    command, stdin = _split_percent(command.strip())
    if not command:
        raise ImportError_(file, where, "command", "is empty")
    argv = [shell, "-c", command]
    role_env = dict(sorted(env.items()))
    role_key = digest(shell, command, repr(role_env), size=6)
    first_word = command.split()[0].rsplit("/", 1)[-1]
    role = ImportedRole(role_name("cron", first_word) + f"-{role_key}",
                        {"runtime": "command", "command": argv,
                         **({"env": role_env} if role_env else {})})
    ident = digest(zone or "", schedule, command, stdin)
    name = job_name("crontab", f"{first_word}-{ident}")
    table: dict[str, Any] = {"name": name, "role": role.name, "title": _clip(command),
                             "prompt": stdin, "cron": schedule}
    if zone is not None:
        table["timezone"] = zone
    table["dst_gap"] = _dst_gap(schedule, zone)
    trigger = build_trigger(file, where, table, default_tz)
    notes = [f"runs {argv!r}: through a shell because cron runs every command line so"]
    if stdin:
        notes.append("the text after % is the task's prompt, written on the command's stdin")
    zone_note = f"CRON_TZ={zone}" if zone else "no CRON_TZ: in [daemon] timezone"
    rule = f"{schedule} ({zone_note})"
    return ImportedJob(ident, table, trigger, role, notes=tuple(notes), rule=rule,
                       source_rule=CronRule(schedule, trigger.tz, own_zone=zone is not None))


def _dst_gap(schedule: str, zone: str | None) -> str:
    """What cron does with a time the day does not have (src/cron.c of Vixie cron and
    cronie, "case medium": when the clock jumps forward, the fixed-time jobs of the skipped
    minutes run right after the jump; wildcard jobs are not caught up). A CRON_TZ= line is
    matched on each real minute in its own zone, so its time in a gap never comes."""
    if zone is not None or cron_wildcard(schedule):
        return "skip"
    return "next_valid"


def _split_percent(command: str) -> tuple[str, str]:
    """Cron's reading of `%`: the first unescaped one ends the command, the rest is stdin."""
    parts, current, index = [], [], 0
    while index < len(command):
        char = command[index]
        if char == "\\" and command[index + 1: index + 2] == "%":
            current.append("%")
            index += 2
            continue
        if char == "%":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    parts.append("".join(current))
    return parts[0].strip(), "\n".join(parts[1:]) + ("\n" if len(parts) > 1 else "")


def _zone(file: str, where: str, name: str, value: str) -> str:
    try:
        return parse_zone(value, None).key
    except ScheduleError as error:
        raise ImportError_(file, where, name, str(error).replace("timezone: ", "")) from None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _clip(text: str) -> str:
    return text if len(text) <= 80 else text[:79] + "…"
