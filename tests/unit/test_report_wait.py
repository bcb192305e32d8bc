"""`[daemon] agent_report_wait`: how long an agent's commands wait for an absent daemon, read
from the config (0 allowed: no wait) and handed to the agent as TASKHERD_REPORT_WAIT."""

from pathlib import Path

import pytest

from taskherd.agent.door import DEFAULT_REPORT_WAIT, report_wait
from taskherd.config import parse_config
from taskherd.model.settings import ConfigError


def parse(raw):
    return parse_config(raw, base_dir=Path("/srv/fleet"))


def test_the_wait_defaults_to_a_minute_and_may_be_zero():
    assert parse({}).daemon.agent_report_wait == 60.0 == DEFAULT_REPORT_WAIT
    assert parse({"daemon": {"agent_report_wait": "2m"}}).daemon.agent_report_wait == 120
    assert parse({"daemon": {"agent_report_wait": 0}}).daemon.agent_report_wait == 0


@pytest.mark.parametrize("value", ["-1s", "soon", True])
def test_a_bad_wait_names_the_key(value):
    with pytest.raises(ConfigError, match=r"daemon\.agent_report_wait = .*expected a duration"):
        parse({"daemon": {"agent_report_wait": value}})


def test_the_agent_reads_its_wait_from_its_environment():
    assert report_wait({"TASKHERD_REPORT_WAIT": "1.5"}) == 1.5
    assert report_wait({"TASKHERD_REPORT_WAIT": "0"}) == 0
    # Started by a daemon that set none (an older one), or a value no daemon writes.
    for env in ({}, {"TASKHERD_REPORT_WAIT": "soon"}, {"TASKHERD_REPORT_WAIT": "nan"}):
        assert report_wait(env) == DEFAULT_REPORT_WAIT
    assert report_wait({"TASKHERD_REPORT_WAIT": "-3"}) == 0
