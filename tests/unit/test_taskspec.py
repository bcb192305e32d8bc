from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model import Priority
from taskherd.policy.taskspec import TaskSpecError, new_task_from

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



@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"role": "coder", "title": "line one\nline two"}, "expected one line"),
        ({"role": "coder", "title": "bell\x07"}, "control characters"),
        ({"role": "coder", "title": "\x1b[2Jwiped"}, "control characters"),
        ({"role": "coder", "title": "t" * 501}, "at most 500"),
        ({"role": "coder", "title": "caf\udce9"}, "title is not valid UTF-8"),
        ({"role": "coder", "title": "t", "prompt": "na\udcefve"}, "prompt is not valid UTF-8"),
        ({"role": "coder", "title": "t", "prompt": "x" * ((1 << 20) + 1)}, "at most 1048576"),
    ],
)
def test_titles_are_one_clean_line_and_text_is_utf8_of_bounded_size(data, message):
    with pytest.raises(TaskSpecError) as caught:
        new_task_from(data, CONFIG)
    assert message in str(caught.value)


def test_a_prompt_of_exactly_the_limit_and_unicode_titles_are_fine():
    task = new_task_from({"role": "coder", "title": "Prüfe café ✓", "prompt": "x" * (1 << 20)},
                         CONFIG)
    assert task.title == "Prüfe café ✓" and len(task.prompt) == 1 << 20


def test_the_prompt_limit_is_a_setting():
    small = parse_config({"daemon": {"max_prompt_bytes": 10},
                          "roles": {"coder": {"command": ["x"]}}}, base_dir=Path("/tmp"))
    assert new_task_from({"role": "coder", "title": "t", "prompt": "x" * 10}, small).prompt
    with pytest.raises(TaskSpecError,
                       match=r"prompt is 11 bytes: expected at most 10 .*max_prompt_bytes"):
        new_task_from({"role": "coder", "title": "t", "prompt": "x" * 11}, small)
