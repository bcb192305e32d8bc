from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model import Priority
from taskherd.taskspec import TaskSpecError, new_task_from

CONFIG = parse_config(
    {"roles": {"coder": {"command": ["x"], "max_attempts": 5, "review": True}},
     "pools": {"gpu": 1}},
    base_dir=Path("/tmp"),
)


def test_role_defaults_apply():
    task = new_task_from({"role": "coder", "title": "t", "priority": "p0"}, CONFIG)
    assert task.max_attempts == 5 and task.review and task.priority is Priority.P0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"title": "t"}, "role is required"),
        ({"role": "coder", "title": " "}, "title = ' '"),
        ({"role": "nobody", "title": "t"}, "role 'nobody' is not defined"),
        ({"role": "coder", "title": "t", "priority": "P7"}, "priority 'P7'"),
        ({"role": "coder", "title": "t", "pool": "tpu"}, "pool 'tpu' is not defined"),
        ({"role": "coder", "title": "t", "max_attempts": 0}, "max_attempts = 0"),
        ({"role": "coder", "title": "t", "colour": "red"}, "unknown field 'colour'"),
        ({"role": "coder", "title": "t", "review": "yes"}, "review = 'yes'"),
        (["role", "coder"], "a task must be an object"),
    ],
)
def test_bad_task_data_names_the_field(data, message):
    with pytest.raises(TaskSpecError) as caught:
        new_task_from(data, CONFIG)
    assert message in str(caught.value)

