"""`taskherd jobs …` and `taskherd runs …` as subprocesses: previews, bad input (exit 2 with
why), refusals (exit 1), and the CLI/config split of job ownership."""

from __future__ import annotations

import json

import pytest

from taskherd.policy.admission import ClaimRequest
from tests.fleet import Fleet

CONFIG = """
[daemon]
database = "q.db"
data_dir = "data"
timezone = "Europe/Berlin"

[roles.worker]
command = ["true"]

[[jobs]]
name = "from-file"
role = "worker"
cron = "@daily"
"""


@pytest.fixture
def fleet(tmp_path):
    made = Fleet(tmp_path, CONFIG)
    yield made
    made.close()


def test_next_previews_an_expression_across_spring_forward(fleet):
    out = fleet.cli("jobs", "next", "--cron", "30 2 * * *", "--tz", "America/New_York", "-n", "5",
                    "--from", "2026-03-06T00:00", "--json").stdout
    local = [fire["local"] for fire in json.loads(out)]
    assert local == ["2026-03-06T02:30:00-05:00", "2026-03-07T02:30:00-05:00",
                     "2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00",
                     "2026-03-10T02:30:00-04:00"]
    text = fleet.cli("jobs", "next", "--cron", "30 2 * * *", "--tz", "America/New_York",
                     "-n", "5").stdout
    assert len(text.strip().splitlines()) == 5


@pytest.mark.parametrize("args, why", [
    (["jobs", "next", "--cron", "61 * * * *"], "cron: '61 * * * *'"),
    (["jobs", "next", "--cron", "* * *"], "cron: '* * *'"),
    (["jobs", "next", "--cron", "0 * * * *", "--tz", "Mars/Base"], "not a known time zone"),
    (["jobs", "next", "--every", "30m", "--window", "22:30-08:00"], "ends before it starts"),
    (["jobs", "add", "x", "-r", "worker", "--every", "30m", "--window", "10:00-10:00"], "is empty"),
    (["jobs", "add", "x", "-r", "nobody", "--cron", "@daily"], "role 'nobody' is not defined"),
    (["jobs", "add", "x", "-r", "worker", "--at", "2001-01-01T00:00"], "is in the past"),
    (["jobs", "get", "nope"], "no job named 'nope'"),
])
def test_bad_input_exits_2_and_says_why(fleet, args, why):
    result = fleet.cli(*args, check=False)
    assert result.returncode == 2, result.stderr
    assert why in result.stderr
    assert fleet.store.list_jobs() == [] or "add" not in args


def test_add_list_update_run_disable_delete(fleet):
    fleet.cli("jobs", "add", "digest", "-r", "worker", "--every", "30m",
              "--window", "08:00-22:30", "--variant", "a", "--variant", "b")
    job = fleet.store.get_job("digest")
    assert job.source == "cli" and len(job.template["variants"]) == 2
    listed = json.loads(fleet.cli("jobs", "list", "--json").stdout)
    # The config's own job is listed too, though no daemon has synced it yet.
    assert [(j["name"], j["synced"]) for j in listed] == [("digest", True), ("from-file", False)]
    assert fleet.cli("jobs", "add", "digest", "-r", "worker", "--cron", "@daily",
                     check=False).returncode == 1
    fleet.cli("jobs", "update", "digest", "--cron", "0 9 * * mon-fri", "--max-retries", "2")
    job = fleet.store.get_job("digest")
    assert job.trigger["cron"] == "0 9 * * mon-fri" and job.max_retries == 2
    assert job.timezone == "Europe/Berlin" and job.template["variants"]
    fleet.cli("jobs", "run", "digest")
    assert fleet.store.get_job("digest").run_now_at is not None
    fleet.cli("jobs", "disable", "digest")
    assert not fleet.store.get_job("digest").enabled
    assert fleet.cli("jobs", "run", "digest", check=False).returncode == 1
    fleet.cli("jobs", "enable", "digest")
    fleet.cli("jobs", "delete", "digest")
    assert fleet.store.list_jobs() == []
    got = fleet.cli("jobs", "next", "nope", check=False)
    assert got.returncode == 2


def test_update_keeps_the_rest_of_an_interval_trigger(fleet):
    # `--window` alone was refused ("only applies to 'every'") and `--every` alone dropped the
    # window: every and window are one trigger, and options not given keep their value.
    fleet.cli("jobs", "add", "social", "-r", "worker", "--every", "30m", "--window", "08:00-12:00",
              "--tz", "America/Chicago")
    fleet.cli("jobs", "update", "social", "--window", "09:00-17:00")
    assert fleet.store.get_job("social").trigger == {
        "every": "1800s", "window": "09:00-17:00", "timezone": "America/Chicago"}
    fleet.cli("jobs", "update", "social", "--every", "15m")
    assert fleet.store.get_job("social").trigger["window"] == "09:00-17:00"
    fleet.cli("jobs", "update", "social", "--window", "")
    assert fleet.store.get_job("social").trigger == {"every": "900s", "timezone": "America/Chicago"}
    fleet.cli("jobs", "update", "social", "--cron", "@daily")
    assert fleet.store.get_job("social").trigger == {"cron": "@daily",
                                                     "timezone": "America/Chicago"}


def test_dst_gap_is_set_previewed_and_kept_until_the_trigger_is_replaced(fleet):
    out = fleet.cli("jobs", "next", "--cron", "30 2 * * *", "--tz", "America/New_York",
                    "--dst-gap", "next_valid", "-n", "2", "--from", "2026-03-07T12:00",
                    "--json").stdout
    assert [f["local"] for f in json.loads(out)] == ["2026-03-08T03:00:00-04:00",
                                                     "2026-03-09T02:30:00-04:00"]
    fleet.cli("jobs", "add", "nightly", "-r", "worker", "--cron", "30 2 * * *",
              "--dst-gap", "next_valid")
    assert fleet.store.get_job("nightly").trigger["dst_gap"] == "next_valid"
    fleet.cli("jobs", "update", "nightly", "--dst-gap", "skip")  # the trigger stays
    assert fleet.store.get_job("nightly").trigger == {
        "cron": "30 2 * * *", "timezone": "Europe/Berlin", "dst_gap": "skip"}
    fleet.cli("jobs", "update", "nightly", "--cron", "0 3 * * *")  # a new trigger, whole
    assert fleet.store.get_job("nightly").trigger == {"cron": "0 3 * * *",
                                                      "timezone": "Europe/Berlin"}
    refused = fleet.cli("jobs", "add", "once", "-r", "worker", "--at", "2030-01-01T02:30",
                        "--dst-gap", "skip", check=False)
    assert refused.returncode == 2 and "dst_gap: 'skip' does not apply to 'at'" in refused.stderr


def test_update_of_a_one_shot_that_already_fired_keeps_its_time(fleet):
    fleet.cli("jobs", "add", "launch", "-r", "worker", "--at", "2099-01-01T09:00")
    with fleet.store._write() as db:  # its time has passed since
        db.execute("UPDATE jobs SET trigger_spec = replace(trigger_spec, '2099', '2001')")
    fleet.cli("jobs", "update", "launch", "--prompt", "new words")  # was "at … is in the past"
    assert fleet.store.get_job("launch").template["prompt"] == "new words"
    result = fleet.cli("jobs", "update", "launch", "--at", "2002-01-01T00:00", check=False)
    assert result.returncode == 2 and "is in the past" in result.stderr


def test_config_jobs_are_changed_in_the_file_not_the_cli(fleet):
    from taskherd.config import load_config
    from taskherd.services.scheduler import Scheduler

    Scheduler(load_config(fleet.config_path), fleet.store).sync_config()
    for args in (["jobs", "update", "from-file", "--cron", "@hourly"],
                 ["jobs", "delete", "from-file"]):
        result = fleet.cli(*args, check=False)
        assert result.returncode == 1 and "config file" in result.stderr
    got = json.loads(fleet.cli("jobs", "get", "from-file", "--json").stdout)
    assert got["source"] == "config" and got["fires"] == []


def test_reload_checks_the_config_and_needs_a_daemon(fleet):
    assert fleet.cli("reload", check=False).returncode == 1
    fleet.config_path.write_text(CONFIG.replace("@daily", "@never"))
    result = fleet.cli("reload", check=False)
    assert result.returncode == 2 and "jobs[0].cron: '@never'" in result.stderr


def test_runs_commands_show_cost_and_tokens(fleet):
    from taskherd.model import Outcome, RunResult
    from taskherd.model.settings import RetryPolicy

    task = fleet.add("paid")
    claim = fleet.store.claim(ClaimRequest("n1", task.created_at, 60.0))
    spent = RunResult(Outcome.SUCCEEDED, cost_usd=0.125, input_tokens=1000, output_tokens=200)
    fleet.store.finish_run(claim.run.id, spent, RetryPolicy(), task.created_at + 1)
    table = fleet.cli("runs", "list").stdout
    assert "$0.1250" in table and "1000/200" in table
    by_role = json.loads(fleet.cli("runs", "cost", "--by", "role", "--json").stdout)
    assert by_role == [{"role": "worker", "runs": 1, "cost_usd": 0.125, "unpriced_runs": 0,
                        "input_tokens": 1000, "output_tokens": 200}]
    by_day = json.loads(fleet.cli("runs", "cost", "--by", "day", "--since", "1d", "--json").stdout)
    assert len(by_day) == 1 and by_day[0]["cost_usd"] == 0.125
    assert json.loads(fleet.cli("runs", "running", "--json").stdout) == []
    assert json.loads(fleet.cli("runs", "stale", "--json").stdout) == []
    assert fleet.cli("runs", "cost", "--since", "soon", check=False).returncode == 2


def test_jobs_list_shows_the_configs_jobs_before_the_first_up(tmp_path):
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "taskherd.toml").write_text(
        '[daemon]\ndatabase = "q.db"\ntimezone = "UTC"\n\n[roles.worker]\ncommand = ["true"]\n\n'
        '[[jobs]]\nname = "nightly"\nrole = "worker"\ncron = "30 2 * * *"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    env["TASKHERD_HOME"] = str(tmp_path / "home")

    def jobs(*args):
        result = subprocess.run([sys.executable, "-m", "taskherd", "jobs", "list", *args],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    [job] = json.loads(jobs("--json"))
    assert (job["name"], job["source"], job["synced"]) == ("nightly", "config", False)
    assert job["next_run_at"].endswith(("02:30:00.000+00:00", "02:30:00.000Z"))
    assert "not synced" in jobs()
