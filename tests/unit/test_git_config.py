"""[roles.NAME.git]'s merge limit and hooks: read, defaulted, and refused naming the key."""

from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model.settings import ConfigError


def git_role(**git):
    config = parse_config({"roles": {"coder": {"command": ["x"], "git": {"repo": "app", **git}}}},
                          base_dir=Path("/srv/fleet"))
    return config.roles["coder"].git


def test_merge_timeout_and_hooks_default_and_read():
    default = git_role()
    assert (default.merge_timeout, default.hooks) == (300.0, False)
    chosen = git_role(merge_timeout="90s", hooks=True)
    assert (chosen.merge_timeout, chosen.hooks) == (90.0, True)


@pytest.mark.parametrize(("key", "value"), [("merge_timeout", "0s"), ("merge_timeout", "soon"),
                                            ("merge_timeout", True), ("hooks", "yes")])
def test_a_bad_value_names_its_key(key, value):
    with pytest.raises(ConfigError, match=rf"roles\.coder\.git\.{key}"):
        git_role(**{key: value})
