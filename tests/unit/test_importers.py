"""The importers read real files (a crontab, plists made with plistlib, OpenClaw's jobs.json,
a systemd timer pair) and each imported job's next 20 fires equal those computed from the
source's own rules, worked out here without the scheduler: croniter, launchd's calendar
matching written out, systemd-analyze, OpenClaw's anchor + k·every."""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import subprocess
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from taskherd.importers import ImportError_, crontab, launchd, openclaw, systemd
from taskherd.policy.schedules import next_fires

START = datetime(2026, 10, 20, 12, 0, tzinfo=UTC)  # 20 daily fires cross the US fall-back
NY, BERLIN = ZoneInfo("America/New_York"), ZoneInfo("Europe/Berlin")


def fires(job, count=20, start=START):
    return next_fires(job.trigger, start, count)


def by_croniter(expr, zone, count=20, start=START):
    it = croniter(expr, start.astimezone(zone))
    return [it.get_next(datetime).astimezone(UTC) for _ in range(count)]


CRONTAB = b"""# a real user's crontab
MAILTO=ops@example.com
PATH=/usr/local/bin:/usr/bin:/bin
CRON_TZ=Europe/Berlin
0 9 * * mon-fri /usr/local/bin/report --daily
CRON_TZ=America/New_York
30 1 * * * backup.sh % first line%second line
@reboot /usr/local/bin/start-agents
TZ=UTC
*/20 * * * * curl -fsS https://example.com/ping
@weekly cleanup \\% old
"""


def test_crontab_lines_fire_as_cron_fires_them_in_their_zone(tmp_path):
    path = tmp_path / "crontab"
    path.write_bytes(CRONTAB)
    result = crontab.parse(str(path), path.read_bytes(), "Europe/Paris")
    report, backup, ping, cleanup = result.jobs
    assert fires(report) == by_croniter("0 9 * * mon-fri", BERLIN)
    assert fires(ping) == by_croniter("*/20 * * * *", UTC)
    assert fires(cleanup) == by_croniter("0 0 * * 0", UTC, start=START)
    # DST: cron runs a fixed-time job once on the fall-back day (2026-11-01), at the first
    # 01:30 (EDT); croniter fires it twice there, so the rule is written out plainly.
    day0 = START.astimezone(NY).date() + timedelta(days=1)
    expected = [datetime.combine(day0 + timedelta(days=i), time(1, 30), NY).astimezone(UTC)
                for i in range(20)]
    assert fires(backup) == expected
    assert expected[12] - expected[11] == timedelta(hours=25)  # the line did cross it
    # cron hands the line to a shell, and the text after % is its stdin (the prompt).
    assert backup.role.table["command"] == ["sh", "-c", "backup.sh"]
    assert backup.table["prompt"] == " first line\nsecond line\n"
    assert cleanup.role.table["command"] == ["sh", "-c", "cleanup % old"]
    assert report.role.table["env"] == {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    assert any("shell" in note for note in backup.notes)
    assert {(d.job, d.field) for d in result.dropped} == {("line 2", "MAILTO"),
                                                          ("line 8", "@reboot")}


def test_crontab_names_are_stable_and_bad_lines_name_file_line_and_field():
    first = crontab.parse("c", CRONTAB, "UTC")
    again = crontab.parse("c", CRONTAB, "UTC")
    assert [j.table["name"] for j in first.jobs] == [j.table["name"] for j in again.jobs]
    for text, where in [(b"CRON_TZ=Mars/Base\n", "c: job 'line 1': CRON_TZ:"),
                        (b"61 * * * * x\n", "c: job 'line 1': schedule: cron:"),
                        (b"* * * x\n", "c: job 'line 1': schedule:"),
                        (b"0 * * * * caf\xe9\n", "c: encoding: not UTF-8 text (byte 0xe9")]:
        with pytest.raises(ImportError_) as error:
            crontab.parse("c", text, "UTC")
        assert str(error.value).startswith(where), error.value


def launchd_fires(entries, zone, start, count=20):
    """launchd's StartCalendarInterval, plainly: each wall minute of the zone that matches
    any entry, a missing key matching any value, weekday 0 or 7 Sunday."""
    found, wall = [], start.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    while len(found) < count:
        wall += timedelta(minutes=1)
        values = {"Minute": wall.minute, "Hour": wall.hour, "Day": wall.day,
                  "Month": wall.month, "Weekday": (wall.isoweekday() % 7)}
        if any(all(values[k] == v % 7 if k == "Weekday" else values[k] == v
                   for k, v in entry.items()) for entry in entries):
            found.append(wall.replace(tzinfo=zone).astimezone(UTC))
    return found


@pytest.mark.parametrize("fmt", [plistlib.FMT_XML, plistlib.FMT_BINARY])
def test_launchd_plists_fire_as_launchd_reads_their_calendar(tmp_path, fmt):
    entries = [{"Hour": 8, "Minute": 0}, {"Weekday": 5, "Hour": 17, "Minute": 30},
               {"Minute": 15, "Weekday": 7}]
    weekly = {"Weekday": 1, "Hour": 9, "Minute": 0}
    plists = {
        "list.plist": {"Label": "com.me.digest", "ProgramArguments": ["/usr/bin/agent", "--go"],
                       "StartCalendarInterval": entries, "EnvironmentVariables": {"A": "1"},
                       "WorkingDirectory": "/srv", "StandardOutPath": "/tmp/o", "RunAtLoad": True},
        "dict.plist": {"Label": "com.me.weekly", "Program": "/usr/bin/weekly",
                       "StartCalendarInterval": weekly, "Disabled": True},
    }
    parsed = {}
    for name, plist in plists.items():
        path = tmp_path / name
        path.write_bytes(plistlib.dumps(plist, fmt=fmt))
        parsed[name] = launchd.parse(str(path), path.read_bytes(), "Europe/Berlin")
    [digest] = parsed["list.plist"].jobs
    [weekly_job] = parsed["dict.plist"].jobs
    # Past Berlin's fall-back (a Sunday): what launchd does with a wall time that happens
    # twice is not documented, so the plain reading below has no rule for it.
    start = datetime(2026, 11, 2, tzinfo=UTC)
    assert fires(digest, start=start) == launchd_fires(entries, BERLIN, start)
    assert fires(weekly_job, start=start) == launchd_fires([weekly], BERLIN, start)
    assert digest.role.table == {"runtime": "command", "command": ["/usr/bin/agent", "--go"],
                                 "env": {"A": "1"}, "workdir": "/srv"}
    assert weekly_job.table["enabled"] is False
    assert {d.field for d in parsed["list.plist"].dropped} == {"RunAtLoad", "StandardOutPath"}


def test_an_unreadable_plist_or_a_bad_calendar_key_names_file_job_and_field(tmp_path):
    with pytest.raises(ImportError_, match=r"^x.plist: plist: not a readable plist"):
        launchd.parse("x.plist", b"\x00\x01garbage", "UTC")
    bad = plistlib.dumps({"Label": "l", "ProgramArguments": ["a"],
                          "StartCalendarInterval": {"Hour": 25}})
    with pytest.raises(ImportError_, match=r"^x.plist: job 'l': schedule: calendar\[0\].hour"):
        launchd.parse("x.plist", bad, "UTC")


def openclaw_document(now_ms):
    anchor = 1_699_999_980_000 + 7 * 60_000  # a whole minute (28,333,340 of them)
    return anchor, {"version": 1, "jobs": [
        {"id": "morning", "name": "Morning brief", "agentId": "main", "enabled": True,
         "schedule": {"kind": "cron", "expr": "0 7 * * *", "tz": "Asia/Tokyo"},
         "sessionTarget": "isolated", "payload": {"kind": "agentTurn", "message": "Brief me"},
         "delivery": {"mode": "announce"}, "state": {"nextRunAtMs": now_ms + 3_600_000}},
        {"id": "pulse", "agentId": "ops", "schedule": {"kind": "every", "everyMs": 1_800_000,
                                                       "anchorMs": anchor},
         "sessionTarget": "main", "payload": {"kind": "systemEvent", "text": "Check in"}},
        {"id": "once", "agentId": "main", "deleteAfterRun": True,
         "schedule": {"kind": "at", "at": "2030-01-02T03:04:00Z"},
         "payload": {"kind": "agentTurn", "message": "Remind me"}},
        {"id": "off", "agentId": "main", "enabled": False,
         "schedule": {"kind": "at", "atMs": 1_900_000_000_000},
         "payload": {"kind": "agentTurn", "message": "x"}},
    ]}


def test_openclaw_jobs_keep_their_trigger_zone_and_anchor(tmp_path):
    anchor, document = openclaw_document(int(START.timestamp() * 1000))
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(document))
    result = openclaw.parse(str(path), path.read_bytes(), "UTC", {"main": "assistant"})
    morning, pulse, once, off = result.jobs
    assert fires(morning) == by_croniter("0 7 * * *", ZoneInfo("Asia/Tokyo"))
    step = 1_800_000
    k = (int(START.timestamp() * 1000) - anchor) // step + 1
    assert fires(pulse) == [datetime.fromtimestamp((anchor + (k + i) * step) / 1000, UTC)
                            for i in range(20)]
    assert fires(once) == [datetime(2030, 1, 2, 3, 4, tzinfo=UTC)]
    assert once.table["delete_after_run"] is True and off.table["enabled"] is False
    assert (morning.table["role"], pulse.table["role"]) == ("assistant", "ops")
    assert (morning.table["prompt"], pulse.table["prompt"]) == ("Brief me", "Check in")
    assert morning.start_at == START.timestamp() + 3600
    assert {(d.job, d.field) for d in result.dropped} == {("morning", "delivery"),
                                                          ("pulse", "sessionTarget")}


@pytest.mark.parametrize("job, where", [
    ({"schedule": {"kind": "weekly"}}, "job 'j': schedule.kind: 'weekly'"),
    ({"schedule": {"kind": "cron", "expr": "0 7 * * *", "tz": "Nowhere/Land"}},
     "job 'j': schedule: timezone: 'Nowhere/Land' is not a known time zone"),
    ({"schedule": {"kind": "every", "everyMs": 7 * 3_600_000}}, "job 'j': schedule.everyMs"),
    ({"payload": {"kind": "speak"}}, "job 'j': payload.kind"),
])
def test_openclaw_bad_input_names_file_job_and_field(job, where):
    table = {"id": "j", "schedule": {"kind": "cron", "expr": "0 7 * * *"},
             "payload": {"kind": "agentTurn", "message": "m"}} | job
    data = json.dumps({"version": 1, "jobs": [table]}).encode()
    with pytest.raises(ImportError_) as error:
        openclaw.parse("jobs.json", data, "UTC")
    assert str(error.value).startswith(f"jobs.json: {where}"), error.value


TIMER = b"""[Unit]
Description=nightly digest

[Timer]
OnCalendar=Mon..Fri *-*-* 09:30:00 Europe/Berlin
OnCalendar=*-*-01 06:00
OnCalendar=*-*-* 10:00:30
Persistent=true
RandomizedDelaySec=5m

[Install]
WantedBy=timers.target
"""
SERVICE = b"""[Service]
Type=oneshot
ExecStart=/usr/bin/digest --to "ops team"
Environment=MODE=fast "LABEL=a b"
WorkingDirectory=/srv/digest
"""


def systemd_fires(spec, count=20, start=START):
    """systemd's own reading of an OnCalendar= expression."""
    out = subprocess.run(["systemd-analyze", "calendar", f"--iterations={count}",
                          f"--base-time=@{int(start.timestamp())}", spec],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "TZ": "UTC"}).stdout
    lines = [line.split(":", 1)[1].strip() for line in out.splitlines()
             if line.strip().startswith(("Next elapse:", "Iter. #"))]
    return [datetime.strptime(line, "%a %Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)
            for line in lines]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_timer_fires_as_systemd_analyze_computes(tmp_path):
    result = systemd.parse({"digest.timer": TIMER, "digest.service": SERVICE}, "UTC")
    weekdays, monthly = result.jobs
    assert fires(weekdays) == systemd_fires("Mon..Fri *-*-* 09:30:00 Europe/Berlin")
    assert fires(monthly) == systemd_fires("*-*-01 06:00 UTC")
    assert weekdays.table["missed_fire"] == "once"
    assert weekdays.role.table == {"runtime": "command", "command": ["/usr/bin/digest", "--to",
                                                                     "ops team"],
                                   "env": {"MODE": "fast", "LABEL": "a b"},
                                   "workdir": "/srv/digest"}
    dropped = {d.field: d.why for d in result.dropped}
    assert dropped["OnCalendar=*-*-* 10:00:30"].startswith("unsupported")
    assert "RandomizedDelaySec" in dropped and "Type" not in dropped


def test_systemd_intervals_and_a_missing_service():
    timer = b"[Timer]\nOnBootSec=5min\nOnUnitActiveSec=15min\n"
    [job] = systemd.parse({"t.timer": timer, "t.service": SERVICE}, "UTC").jobs
    assert job.table["every"] == "900s" and job.table["missed_fire"] == "skip"
    with pytest.raises(ImportError_, match=r"^t.timer: job 't.timer': Unit: t.service was not"):
        systemd.parse({"t.timer": timer}, "UTC")


def test_openclaw_every_without_an_anchor_counts_from_its_planned_next_run():
    planned = 1_799_999_940_000 + 20 * 60_000  # a whole minute
    job = {"id": "p", "schedule": {"kind": "every", "everyMs": 3_600_000},
           "payload": {"kind": "agentTurn", "message": "m"}, "state": {"nextRunAtMs": planned}}
    [imported] = openclaw.parse("j", json.dumps({"version": 1, "jobs": [job]}).encode(),
                                "UTC").jobs
    start = datetime.fromtimestamp(planned / 1000 - 1, UTC)
    assert fires(imported, start=start) == [datetime.fromtimestamp(planned / 1000 + 3600 * i, UTC)
                                            for i in range(20)]
    assert "from its planned next run" in imported.notes[0]


def test_launchd_start_interval_says_where_its_grid_differs():
    plist = plistlib.dumps({"Label": "l", "ProgramArguments": ["a"], "StartInterval": 7000})
    [job] = launchd.parse("l.plist", plist, "UTC").jobs
    assert job.table["every"] == "7000s" and job.rule == "StartInterval 7000"
    assert any("does not divide a day" in note for note in job.notes)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("spec", ["hourly", "daily", "weekly", "monthly", "quarterly",
                                  "*:0/15", "Sat,Sun 10:00", "*-*-* 08..18:30",
                                  "Mon..Fri *-*-* 9,17:05", "*-02-29 12:00",
                                  "Tue *-*-* 02:30 America/New_York"])
def test_on_calendar_forms_fire_as_systemd_analyze_says(spec):
    timer = f"[Timer]\nOnCalendar={spec}\n".encode()
    [job] = systemd.parse({"t.timer": timer, "t.service": SERVICE}, "UTC").jobs
    assert fires(job) == systemd_fires(spec if " " in spec and "/" in spec.split()[-1]
                                       else f"{spec} UTC")


# --- the dry run's two lists: the source's fires by its own rules beside taskherd's ---------

BEFORE_2027 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)  # a year ahead holds both DST changes


def view(job, now=BEFORE_2027):
    from taskherd.ops.imports import job_view

    return job_view(job, now.timestamp())


def with_gap(job, policy):
    """The same job under another dst_gap: what it would fire as without its source's."""
    from dataclasses import replace

    from taskherd.importers.model import TRIGGER_KEYS
    from taskherd.policy.schedules import parse_trigger

    table = {k: job.table[k] for k in TRIGGER_KEYS if k in job.table} | {"dst_gap": policy}
    return replace(job, trigger=parse_trigger(table, job.trigger.tz.key))


def test_crontab_jobs_get_crons_gap_rule_and_the_dry_run_agrees_with_cron():
    text = (b"30 2 * * * fixed\n*/20 2 * * * wild\n"
            b"CRON_TZ=Europe/Paris\n30 2 * * * zoned\n")
    fixed, wild, zoned = crontab.parse("c", text, "Europe/Paris").jobs
    # Vixie cron and cronie run a fixed time of a skipped minute right after the jump; not a
    # wildcard line; a CRON_TZ line is matched on real minutes of its zone: never in a gap.
    assert [j.table["dst_gap"] for j in (fixed, wild, zoned)] == ["next_valid", "skip", "skip"]
    for job in (fixed, wild):
        shown = view(job)
        assert shown["fires_match"] == "same", shown["differences"]
        assert shown["source_fires"] == shown["next_fires"] and shown["dst_gap"]
        assert shown["source_fires_by"] == "cron's rules (Vixie cron and cronie)"
    # Under today's shift the fixed line would run at 03:30, cron runs it at 03:00: said.
    [difference] = view(with_gap(fixed, "shift"))["differences"]
    assert difference == ("DST change of 2027-03-28: only taskherd 2027-03-28 03:30 CEST; "
                          "only the source 2027-03-28 03:00 CEST")
    # cronie runs a CRON_TZ line's 02:30 in both passes of the repeated hour; taskherd once.
    [twice] = view(zoned)["differences"]
    assert twice.startswith("DST change of 2027-10-31: only taskherd none; only the source "
                            "2027-10-31 02:30 CET")


def test_launchd_jobs_keep_shift_and_the_dry_run_agrees_with_launchd():
    plist = plistlib.dumps({"Label": "l", "ProgramArguments": ["a"],
                            "StartCalendarInterval": [{"Hour": 2, "Minute": 30},
                                                      {"Weekday": 7, "Hour": 9, "Minute": 0}]})
    [job] = launchd.parse("l.plist", plist, "America/New_York").jobs
    assert job.table["dst_gap"] == "shift"
    shown = view(job)
    assert shown["fires_match"] == "same" and shown["source_fires"] == shown["next_fires"]
    assert shown["source_fires_by"].startswith("launchd's calendar matching")
    differs = view(with_gap(job, "skip"))
    assert differs["fires_match"] == "differs"
    assert "DST change of 2027-03-14" in differs["differences"][0]
    # Every minute of 01:00-01:59 (no Minute key): launchd walks wall time, so the repeated
    # hour passes once; taskherd keeps real time through it. Said, not hidden.
    hourly = plistlib.dumps({"Label": "h", "ProgramArguments": ["a"],
                             "StartCalendarInterval": {"Hour": 1}})
    [minutes] = launchd.parse("h.plist", hourly, "America/New_York").jobs
    assert "DST change of 2027-11-07" in view(minutes)["differences"][0]


def test_launchd_and_systemd_intervals_say_their_fires_cannot_be_known():
    plist = plistlib.dumps({"Label": "l", "ProgramArguments": ["a"], "StartInterval": 900})
    [job] = launchd.parse("l.plist", plist, "UTC").jobs
    shown = view(job)
    assert shown["fires_match"] == "unknown" and shown["source_fires"] is None
    assert "from when it loaded the job" in shown["source_fires_unknown"]


ON_CALENDAR = [
    "*-*-* 02:30",  # in Paris's gap on 2027-03-28: systemd skips it
    "Mon..Fri *-*-* 09:30:00 Europe/Berlin",
    "*:0/30",  # a wildcard across both changes
]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("spec", ON_CALENDAR)
def test_systemd_jobs_skip_the_gap_as_systemd_analyze_does(spec):
    timer = f"[Timer]\nOnCalendar={spec}\n".encode()
    [job] = systemd.parse({"t.timer": timer, "t.service": SERVICE}, "Europe/Paris").jobs
    assert job.table["dst_gap"] == "skip"
    shown = view(job)
    assert shown["source_fires_by"] == "systemd-analyze calendar"
    if spec == "*:0/30":
        # systemd passes a repeated hour once, even a wildcard; taskherd keeps real time.
        [difference] = shown["differences"]
        assert difference.startswith("DST change of 2027-10-31: only taskherd 2027-10-31 02:00 CET")
    else:
        assert shown["fires_match"] == "same", shown["differences"]
    if spec.startswith("*-*-*"):
        assert "DST change of 2027-03-28" in view(with_gap(job, "shift"))["differences"][0]


def test_systemd_without_systemd_analyze_uses_its_own_reading_and_says_so(monkeypatch):
    timer = b"[Timer]\nOnCalendar=*-*-* 02:30\n"
    [job] = systemd.parse({"t.timer": timer, "t.service": SERVICE}, "Europe/Paris").jobs
    monkeypatch.setenv("PATH", "")
    shown = view(job)
    assert shown["source_fires_by"] == "systemd's OnCalendar rules (no systemd-analyze here)"
    assert shown["fires_match"] == "same", shown["differences"]
    assert view(with_gap(job, "next_valid"))["fires_match"] == "differs"


def test_openclaw_cron_skips_the_gap_as_croner_does_and_every_and_at_agree():
    now_ms = int(BEFORE_2027.timestamp() * 1000)
    _, document = openclaw_document(now_ms)
    document["jobs"][0]["schedule"] = {"kind": "cron", "expr": "30 2 * * *", "tz": "Europe/Paris"}
    result = openclaw.parse("j", json.dumps(document).encode(), "UTC")
    morning, pulse, once, _ = result.jobs
    assert morning.table["dst_gap"] == "skip" and "dst_gap" not in once.table
    for job in (morning, pulse, once):
        shown = view(job)
        assert shown["fires_match"] == "same", (job.source_id, shown["differences"])
    assert view(pulse)["source_fires_by"] == "OpenClaw's every (anchorMs + k·everyMs)"
    [difference] = view(with_gap(morning, "shift"))["differences"]
    assert difference.startswith("DST change of 2027-03-28: only taskherd 2027-03-28 03:30")
