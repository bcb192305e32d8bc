"""Who hears of a budget's pause and resumption: a role's delivery targets, for the events
its `on` names (budget_paused by default, budget_resumed when asked for); the fleet's budget
tells every role's targets, each alias once. A role's budget events are not its tasks'."""

from __future__ import annotations

import pytest

from taskherd.config import parse_config
from taskherd.host.senders import one_line
from taskherd.model.settings import ConfigError
from taskherd.ops.budget import budget_targets
from taskherd.policy.taskspec import new_task_from


def config(tmp_path, **roles):
    return parse_config({"roles": {name: {"command": ["true"], **role}
                                   for name, role in roles.items()}}, base_dir=tmp_path)


def test_a_pause_reaches_the_roles_targets_and_a_resumption_only_when_asked(tmp_path):
    fleet = config(tmp_path, coder={"deliver_to": ["@ops", "@pager"]},
                   qa={"deliver_to": ["@ops"], "on": ["dead", "budget_resumed"]},
                   docs={})
    assert budget_targets(fleet, "coder", "budget_paused") == ["ops", "pager"]
    assert budget_targets(fleet, "coder", "budget_resumed") == []
    assert budget_targets(fleet, "qa", "budget_paused") == []  # its `on` leaves it out
    assert budget_targets(fleet, "qa", "budget_resumed") == ["ops"]
    assert budget_targets(fleet, "docs", "budget_paused") == []
    assert budget_targets(fleet, "fleet", "budget_paused") == ["ops", "pager"]
    assert budget_targets(fleet, "gone", "budget_paused") == []  # a role since removed


def test_a_roles_budget_events_are_not_given_to_its_tasks(tmp_path):
    fleet = config(tmp_path, coder={"deliver_to": ["@ops"], "on": ["completed",
                                                                   "budget_paused"]},
                   qa={"deliver_to": ["@ops"], "on": ["budget_paused"]})
    coder = new_task_from({"role": "coder", "title": "t"}, fleet)
    assert coder.meta["deliver_on"] == ["completed"]
    qa = new_task_from({"role": "qa", "title": "t"}, fleet)
    assert "deliver_to" not in qa.meta  # the role asked for its budget's events alone


def test_an_unknown_event_in_a_roles_on_is_named(tmp_path):
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, coder={"deliver_to": ["@ops"], "on": ["budget_pause"]})
    assert "roles.coder.on = 'budget_pause'" in str(caught.value)
    assert "budget_resumed" in str(caught.value)


def test_slack_and_discord_lines_of_a_budget_event():
    paused = {"event": "budget_paused", "budget": {"scope": "coder", "until": 0.0,
                                                   "reason": "budget: coder daily limit "
                                                             "$5.00 reached"}}
    assert one_line(paused) == ("taskherd: role coder paused: budget: coder daily limit "
                                "$5.00 reached")
    resumed = {"event": "budget_resumed", "budget": {"scope": "fleet", "paused_until": 0.0}}
    assert one_line(resumed) == "taskherd: the fleet is within its budget again: spawns resume"
