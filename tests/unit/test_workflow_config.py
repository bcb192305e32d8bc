"""Workflows in taskherd.toml: chains, reviewers, gates and the monitor, validated at load
with every problem named at once; and the pure decisions of taskherd.policy.chains."""

from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model import Priority, TaskState
from taskherd.model.settings import ConfigError, FollowUp
from taskherd.policy.chains import (
    condition_holds,
    fires,
    one_line_title,
    review_verdict,
    workflow_of,
)


def parse(raw):
    return parse_config(raw, base_dir=Path("/srv/fleet"))


def role(**keys):
    return {"command": ["agent"], **keys}


def test_a_fleet_described_only_in_the_config():
    config = parse({
        "daemon": {"max_depth": 4},
        "monitor": {"planner": "ceo", "low_water": 5, "planner_every": "4h", "max_spawn": 10},
        "roles": {
            "ceo": role(),
            "coder": role(review_by="qa", max_reviews=2,
                          chain=[{"role": "docs", "title": "Document {parent_title}",
                                  "on": "success", "delay": "10m", "priority": "P1"}],
                          gates=[{"name": "tests", "argv": ["pytest", "-q"], "timeout": "5m",
                                  "idle_timeout": "90s"},
                                 {"name": "lint", "argv": ["ruff", "check"]}]),
            "qa": role(), "docs": role(),
        },
    })
    coder = config.roles["coder"]
    assert coder.review_by == "qa" and coder.max_reviews == 2
    assert coder.chain == (FollowUp("docs", "Document {parent_title}", priority=Priority.P1,
                                    delay=600.0),)
    assert coder.gates[0].argv == ("pytest", "-q") and coder.gates[0].timeout == 300
    assert coder.gates[0].idle_timeout == 90
    assert coder.gates[1].idle_timeout is None  # the role's idle_timeout applies
    assert (config.monitor.planner, config.monitor.low_water, config.monitor.planner_every,
            config.monitor.max_spawn) == ("ceo", 5, 4 * 3600, 10)
    workflow = workflow_of(config)
    assert workflow.max_depth == 4 and workflow.reviewed("coder")
    assert not workflow.reviewed("qa")


def test_defaults():
    config = parse({"roles": {"coder": role()}})
    assert config.daemon.max_depth == 10 and config.monitor.max_spawn == 20
    assert config.monitor.planner is None and config.roles["coder"].max_reviews == 3


def test_a_loop_of_default_chains_is_named_unless_every_link_has_a_condition():
    loop = {"coder": role(chain=[{"role": "qa", "title": "QA"}]),
            "qa": role(chain=[{"role": "coder", "title": "fix", "when": "contains:FAIL"}])}
    with pytest.raises(ConfigError, match="loop forever: coder → qa → coder"):
        parse({"roles": loop})
    loop["coder"]["chain"][0]["when"] = "regex:^ready$"
    assert parse({"roles": loop}).roles["qa"].chain[0].when == "contains:FAIL"
    with pytest.raises(ConfigError, match="loop forever: coder → coder"):
        parse({"roles": {"coder": role(chain=[{"role": "coder", "title": "again"}])}})


def test_every_workflow_problem_at_once():
    with pytest.raises(ConfigError) as error:
        parse({
            "monitor": {"planner": "boss", "low_watermark": 3},
            "roles": {
                "coder": role(review_by="nobody", chain=[
                    {"role": "ghost", "title": "x"},
                    {"role": "coder", "title": "{parent_name}", "when": "containz:x"}]),
                "qa": role(review_by="qa", gates=[{"name": "t", "argv": "pytest -q"}]),
                "ops": role(chain=[{"role": "qa", "title": "t", "on": "sometimes"}],
                            gates=[{"name": "a", "argv": ["x"]}, {"name": "a", "argv": ["y"]}]),
                "docs": role(gates=[{"name": "b", "argv": ["x"], "idle_timeout": "0s"}]),
            },
        })
    text = str(error.value)
    for expected in [
        "unknown key 'monitor.low_watermark'", "did you mean 'low_water'",
        "roles.coder.chain[1].title = '{parent_name}': {parent_name} is not a template field",
        "roles.qa.gates[0].argv = 'pytest -q'", "roles.ops.chain[0].on = 'sometimes'",
        "roles.ops.gates: two gates are named 'a'",
        "roles.docs.gates[0].idle_timeout = '0s': must be positive",
        "monitor.planner = 'boss' is not a role",
    ]:
        assert expected in text, (expected, text)
    # The cross-role checks run once each role reads well: a second pass names them.
    with pytest.raises(ConfigError) as error:
        parse({"roles": {"coder": role(review_by="nobody",
                                       chain=[{"role": "ghost", "title": "x"}]),
                         "qa": role(review_by="qa")}})
    text = str(error.value)
    assert "roles.coder.review_by = 'nobody' is not a role" in text
    assert "roles.coder.chain[0].role = 'ghost' is not a role" in text
    assert "roles.qa.review_by = 'qa': a role cannot review its own work" in text


@pytest.mark.parametrize(("when", "text", "holds"), [
    (None, "", True),
    ("contains:ALERT", "disk ALERT now", True),
    ("contains:ALERT", "alert", False),
    ("regex:^disk \\d+%$", "checking\ndisk 97%\n", True),
    ("regex:^disk \\d+%$", "disk full", False),
])
def test_conditions(when, text, holds):
    assert condition_holds(when, text) is holds


def test_follow_ups_fire_by_how_the_parent_ended():
    on = {kind: FollowUp("qa", "t", on=kind) for kind in ("success", "failure", "complete")}
    fired = {state: sorted(k for k, f in on.items() if fires(f, state, ""))
             for state in (TaskState.COMPLETED, TaskState.DEAD, TaskState.CANCELLED)}
    assert fired == {TaskState.COMPLETED: ["complete", "success"],
                     TaskState.DEAD: ["complete", "failure"], TaskState.CANCELLED: []}


def test_the_last_verdict_printed_wins_and_titles_stay_one_line():
    assert review_verdict("REJECTED: no tests", "thinking\nAPPROVED") == ("approve", None)
    assert review_verdict("APPROVED\nwait\nREJECTED:  fix logout ") == ("reject", "fix logout")
    assert review_verdict("I approve of this", None) is None
    assert one_line_title("Review: a\nb\tc") == "Review: a b c"
    assert len(one_line_title("x" * 900)) == 500
