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
from taskherd.schedules import next_fires

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
