"""What an importer makes of one source file: jobs (each a `[[jobs]]` table), the command
roles they need, and every source field not carried over, with why."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from taskherd.importers.fires import SourceRule
from taskherd.policy.schedules import ScheduleError, Trigger, parse_trigger

TRIGGER_KEYS = ("cron", "calendar", "every", "window", "at", "manual", "timezone", "dst_gap")


class ImportError_(ValueError):
    """Bad input in a source file: names the file, the job and the field (exit 2)."""

    def __init__(self, file: str, job: str | None, field_name: str, why: str):
        where = f"{file}: " + (f"job {job!r}: " if job else "")
        super().__init__(f"{where}{field_name}: {why}")


@dataclass(frozen=True)
class Dropped:
    """A source field not carried over, and why."""

    file: str
    job: str
    field: str
    why: str


@dataclass(frozen=True)
class ImportedRole:
    """A `command` role for a source's program: argv as the source ran it, env, workdir.
    `agent` roles (OpenClaw's agents) are only named: their runtime is the user's choice."""

    name: str
    table: dict[str, Any]


@dataclass(frozen=True)
class ImportedJob:
    source_id: str  # the source's own id, kept in the job's name so a re-import is a no-op
    table: dict[str, Any]  # a `[[jobs]]` table
    trigger: Trigger  # built by the scheduler's own parser, so the preview is the scheduler's
    role: ImportedRole | None = None  # None: the role is the user's (an OpenClaw agent)
    start_at: float | None = None  # the source's own next fire (OpenClaw's state.nextRunAtMs)
    notes: tuple[str, ...] = ()  # what the dry run must say about how it runs
    rule: str = ""  # the schedule in the source's own words, shown beside the fires
    source_rule: SourceRule | None = None  # the source's own fires, to compare with taskherd's


def interval_notes(seconds: float, counted_from: str) -> tuple[str, ...]:
    """What an interval becomes: taskherd's `every` is a grid from each local midnight."""
    notes = [f"{counted_from}; taskherd's every counts from each local midnight"]
    if 86400 % seconds:
        notes.append(f"{seconds:g}s does not divide a day: the last gap before midnight is "
                     "shorter, then the grid starts again")
    return tuple(notes)


@dataclass
class Imported:
    jobs: list[ImportedJob] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)

    def extend(self, other: Imported) -> None:
        self.jobs += other.jobs
        self.dropped += other.dropped


def build_trigger(file: str, job: str, table: dict[str, Any], default_tz: str | None) -> Trigger:
    """The scheduler's trigger for an imported table; its refusal names file, job and field."""
    try:
        return parse_trigger({k: table[k] for k in TRIGGER_KEYS if k in table}, default_tz)
    except ScheduleError as error:
        raise ImportError_(file, job, "schedule", str(error)) from None


def digest(*parts: str, size: int = 10) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:size]


_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]+")


def job_name(source: str, ident: str) -> str:
    """`source:ident`, in the characters a job name allows (a long id is cut and hashed)."""
    text = _UNSAFE.sub("-", ident).strip("-.:_") or digest(ident)
    name = f"{source}:{text}"
    return name if len(name) <= 100 else f"{name[:89]}-{digest(ident)}"


def role_name(prefix: str, ident: str) -> str:
    text = re.sub(r"[^a-z0-9]+", "-", ident.lower()).strip("-")[:40].strip("-")
    return f"{prefix}-{text}" if text else prefix


def decode_text(file: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ImportError_(file, None, "encoding",
                           f"not UTF-8 text (byte 0x{data[error.start]:02x} "
                           f"at offset {error.start})") from None
