"""Job tables → JobSpec: every error names jobs[N].key and the value, nothing is guessed."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model.settings import ConfigError
from taskherd.policy.jobs import JobError, describe_trigger, parse_job, parse_jobs

BASE = {"daemon": {"timezone": "Europe/Berlin", "database": "q.db"},
        "roles": {"worker": {"command": ["true"]}}, "pools": {"gpu": 1}}


def config(jobs=()):
    return parse_config(BASE | {"jobs": list(jobs)}, base_dir=Path("/tmp"))


def test_a_full_job_table():
    spec = parse_job({"name": "digest", "role": "worker", "prompt": "p", "priority": "P1",
                      "pool": "gpu", "every": "30m", "window": "08:00-22:30",
                      "overlap": "queue", "missed_fire": "all", "max_retries": 2,
                      "variants": [{"prompt": "a"}, {"prompt": "b"}]}, config())
    definition = spec.definition()
    assert definition.timezone == "Europe/Berlin"  # the daemon's zone by default
    assert definition.trigger == {"every": "1800s", "window": "08:00-22:30",
                                  "timezone": "Europe/Berlin"}
    assert definition.template["title"] == "digest"  # the name when no title is given
    assert (definition.overlap, definition.missed_fire, definition.max_retries) == (
        "queue", "all", 2)
    assert describe_trigger(definition.trigger) == "every 30m 08:00-22:30"


def test_every_trigger_kind_parses():
    cfg = config()
    for table in ({"cron": "@hourly"}, {"calendar": [{"hour": 9, "minute": 0, "weekday": 1}]},
                  {"every": "1s"}, {"at": "2030-01-01T09:00", "delete_after_run": True}, {}):
        spec = parse_job({"name": "j", "role": "worker", **table}, cfg)
        assert spec.trigger.kind in {"cron", "calendar", "every", "at", "manual"}


@pytest.mark.parametrize("table, message", [
    ({"role": "worker", "cron": "61 * * * *"}, "jobs[0].cron: '61 * * * *'"),
    ({"role": "worker", "cron": "0 * * * *", "timezone": "Mars/Base"},
     "jobs[0].timezone: 'Mars/Base' is not a known time zone"),
    ({"role": "worker", "every": "30m", "window": "22:30-08:00"}, "jobs[0].window: '22:30-08:00'"),
    ({"role": "worker", "every": "30m", "cron": "@daily"}, "are set together"),
    ({"role": "worker", "cron": "@daily", "overlap": "never"},
     "jobs[0].overlap = 'never': expected one of skip, allow, queue"),
    ({"role": "worker", "missed_fire": "twice"}, "jobs[0].missed_fire = 'twice'"),
    ({"role": "worker", "max_retries": -1}, "jobs[0].max_retries = -1"),
    ({"role": "worker", "shedule": "x"}, "jobs[0].shedule: unknown key"),
    ({"role": "nobody"}, "jobs[0].role 'nobody' is not defined"),
    ({"role": "worker", "pool": "tpu"}, "jobs[0].pool 'tpu' is not defined"),
    ({"role": "worker", "variants": [{"prompt": "a", "colour": "red"}]},
     "jobs[0].variants[0].colour: unknown key"),
    ({"role": "worker", "variants": [{"from": "06:00"}, {"prompt": "b"}]},
     "give every variant a 'from' time or none"),
    ({"role": "worker", "variants": [{"from": "25:00"}]}, "jobs[0].variants[0].from = '25:00'"),
    ({"role": "worker", "enabled": "yes"}, "jobs[0].enabled = 'yes': expected true or false"),
])
def test_bad_job_tables_name_the_key_and_value(table, message):
    with pytest.raises(JobError) as caught:
        parse_jobs(_raw([{"name": "j", **table}]))
    assert message in str(caught.value)


def _raw(jobs):
    # Build the Config without validating its jobs, so parse_jobs raises JobError itself.
    from taskherd.model.settings import Config

    base = config()
    return Config(base.daemon, base.roles, base.pools, tuple(jobs), None)


def test_names_are_required_valid_and_unique():
    with pytest.raises(JobError, match=r"jobs\[0\].name is required"):
        parse_jobs(_raw([{"role": "worker"}]))
    with pytest.raises(JobError, match=r"jobs\[0\].name = 'a b'"):
        parse_jobs(_raw([{"name": "a b", "role": "worker"}]))
    with pytest.raises(JobError, match=r"jobs\[1\].name = 'x': already used by jobs\[0\]"):
        parse_jobs(_raw([{"name": "x", "role": "worker"}, {"name": "x", "role": "worker"}]))


def test_config_load_refuses_a_bad_job_before_any_daemon_starts():
    with pytest.raises(ConfigError, match=r"jobs\[1\].cron"):
        config([{"name": "ok", "role": "worker", "cron": "@daily"},
                {"name": "bad", "role": "worker", "cron": "* * *"}])


def test_jobs_need_the_daemon_timezone_or_their_own():
    raw = {"daemon": {"database": "q.db"}, "roles": {"worker": {"command": ["true"]}},
           "jobs": [{"name": "j", "role": "worker", "cron": "@daily"}]}
    with pytest.raises(ConfigError, match="timezone is required"):
        parse_config(raw, base_dir=Path("/tmp"))
