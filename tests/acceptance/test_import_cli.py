"""`taskherd import` and `taskherd export` as a person runs them (`python -m taskherd …`): a dry
run writes nothing, --apply adds the jobs once (a second import changes nothing), OpenClaw's
next fire is kept, bad input exits 2 naming file, job and field with nothing written, and an
export reads back as the same jobs."""

from __future__ import annotations

import json
import time
import tomllib

import pytest

from taskherd.config import load_config
from taskherd.policy.jobs import parse_job
from tests.fleet import Fleet

CONFIG = """
[daemon]
database = "q.db"
data_dir = "data"
timezone = "Europe/Berlin"

[roles.assistant]
command = ["true"]
"""
CRONTAB = """MAILTO=me@example.com
CRON_TZ=America/New_York
30 1 * * * touch {marker} % hello
@reboot touch {marker}
"""


@pytest.fixture
def fleet(tmp_path):
    made = Fleet(tmp_path, CONFIG)
    yield made
    made.close()


def test_dry_run_then_apply_once_then_again_changes_nothing(fleet):
    marker = fleet.root / "ran"
    (fleet.root / "crontab").write_text(CRONTAB.format(marker=marker))
    dry = fleet.cli("import", "crontab", "crontab")
    assert "[[jobs]]" in dry.stdout and 'command = ["sh", "-c", "touch ' in dry.stdout
    assert "through a shell because cron runs every command line so" in dry.stdout
    assert "@reboot" in dry.stdout and "MAILTO" in dry.stdout  # named as not carried over
    assert fleet.store.list_jobs() == [] and not marker.exists()  # nothing written, nothing run
    # The roles it needs are not in the config yet: --apply says so and writes nothing.
    refused = fleet.cli("import", "crontab", "crontab", "--apply", check=False)
    assert refused.returncode == 2 and "are not in" in refused.stderr
    assert fleet.store.list_jobs() == []
    # The user adds the printed fragment's roles to taskherd.toml, as the dry run says.
    fragment = tomllib.loads(dry.stdout.split("\nNot carried over:")[0])
    with fleet.config_path.open("a") as config:
        for name, role in fragment["roles"].items():
            config.write(f"\n[roles.{json.dumps(name)}]\ncommand = {json.dumps(role['command'])}\n")
    applied = json.loads(fleet.cli("import", "crontab", "crontab", "--apply", "--json").stdout)
    [(name, change)] = applied["applied"].items()
    assert change == "created"
    job = fleet.store.get_job(name)
    # A CRON_TZ line: cronie matches it on real minutes in its zone, so a time in a
    # spring-forward gap never comes; the stored job keeps that policy.
    assert job.source == "cli" and job.trigger == {"cron": "30 1 * * *",
                                                   "timezone": "America/New_York",
                                                   "dst_gap": "skip"}
    again = fleet.cli("import", "crontab", "crontab", "--apply")
    assert f"unchanged job {name!r}" in again.stdout
    assert fleet.store.get_job(name).version == job.version
    assert not marker.exists()


def test_openclaw_role_map_keeps_its_next_fire(fleet):
    soon = int((time.time() + 7200) * 1000)
    (fleet.root / "jobs.json").write_text(json.dumps({"version": 1, "jobs": [
        {"id": "brief", "agentId": "main", "schedule": {"kind": "cron", "expr": "0 7 * * *",
                                                        "tz": "Asia/Tokyo"},
         "payload": {"kind": "agentTurn", "message": "Brief me"},
         "state": {"nextRunAtMs": soon}}]}))
    dry = fleet.cli("import", "openclaw", "jobs.json").stdout
    assert "[roles.main] is needed" in dry
    fleet.cli("import", "openclaw", "jobs.json", "--role-map", "main=assistant", "--apply")
    job = fleet.store.get_job("openclaw:brief")
    assert job.template["role"] == "assistant" and job.template["prompt"] == "Brief me"
    assert job.next_run_at == pytest.approx(soon / 1000)


@pytest.mark.parametrize("name, content, said", [
    ("crontab", b"0 9 * * * caf\xe9\n", "crontab: encoding: not UTF-8 text (byte 0xe9"),
    ("crontab", b"CRON_TZ=Mars/Base\n0 9 * * * x\n", "crontab: job 'line 1': CRON_TZ:"),
    ("agent.plist", b"not a plist", "agent.plist: plist: not a readable plist"),
])
def test_bad_input_exits_2_naming_file_job_and_field(fleet, name, content, said):
    (fleet.root / name).write_bytes(content)
    source = "launchd" if name.endswith(".plist") else "crontab"
    result = fleet.cli("import", source, name, "--apply", check=False)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and "Traceback" not in result.stderr
    assert fleet.store.list_jobs() == []


def test_crontab_from_stdin(fleet):
    result = fleet.cli("import", "crontab", "-", "--json", input="@hourly echo hi\n")
    [job] = json.loads(result.stdout)["jobs"]
    assert job["table"]["cron"] == "@hourly" and len(job["next_fires"]) == 3


def test_export_reads_back_as_the_same_jobs(fleet):
    fleet.cli("jobs", "add", "digest", "-r", "assistant", "--every", "30m",
              "--window", "08:00-22:30", "--prompt", 'say "hi"\n\\ done')
    fleet.cli("jobs", "add", "weekly", "-r", "assistant", "--calendar", "weekday=1,hour=9,minute=0")
    exported = tomllib.loads(fleet.cli("export").stdout)
    assert exported["roles"] == {"assistant": {"command": ["true"]}}
    config = load_config(fleet.config_path)
    for table in exported["jobs"]:
        assert parse_job(table, config).definition().same_as(
            fleet.store.get_job(table["name"]).definition())
    as_json = json.loads(fleet.cli("export", "--format", "json").stdout)
    assert [job["name"] for job in as_json["jobs"]] == ["digest", "weekly"]


def test_dry_run_sets_the_sources_fires_beside_taskherds_and_says_a_difference(fleet):
    # A plain line agrees with cron; a CRON_TZ line at 02:30 in Paris is run twice by cronie
    # on the fall-back night (real minutes in its zone), taskherd once: said, not refused.
    (fleet.root / "crontab").write_text("0 9 * * * plain\nCRON_TZ=Europe/Paris\n"
                                        "30 2 * * * zoned\n")
    text = fleet.cli("import", "crontab", "crontab").stdout
    assert "# next fires by cron's rules (Vixie cron and cronie): " in text
    assert "# the same fires, DST changes of the coming year included" in text
    assert "# DIFFERS from the source: DST change of " in text
    assert "dst_gap = next_valid (right after the jump, 02:30 → 03:00)" in text
    assert "dst_gap = skip (not that day)" in text
    plan = json.loads(fleet.cli("import", "crontab", "crontab", "--json").stdout)
    plain, zoned = plan["jobs"]
    assert plain["fires_match"] == "same" and plain["source_fires"] == plain["next_fires"]
    assert (plain["dst_gap"], zoned["dst_gap"]) == ("next_valid", "skip")
    assert zoned["fires_match"] == "differs" and "only the source" in zoned["differences"][0]
    assert fleet.store.list_jobs() == []
