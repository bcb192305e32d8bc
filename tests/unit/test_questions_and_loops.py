"""The pure readers of a quiet or a busy agent: a question at the end of its output, a block
of output repeating, the same tool call again and again."""

from __future__ import annotations

import pytest

from taskherd.policy.loops import RepeatedCalls, RepeatedLines
from taskherd.policy.questions import question_in


@pytest.mark.parametrize("output, question", [
    ("Overwrite config.toml? [y/N] ", "Overwrite config.toml? [y/N]"),
    ("npm warn\nProceed? (y/n) ", "Proceed? (y/n)"),
    ("Build done.\nPress Enter to continue", "Press Enter to continue"),
    # Claude Code's permission prompt, colours and all.
    (("\x1b[1mDo you want to make this edit to app.py?\x1b[0m\n❯ 1. Yes\n  2. No, and tell "
      "Claude what to do differently (esc)\n"),
     ("Do you want to make this edit to app.py? ❯ 1. Yes 2. No, and tell Claude what to do "
      "differently (esc)")),
    # Codex's approval prompt.
    ("Would you like to run the following command?\n$ rm -rf build\n▌ Yes (y)  No (n)",
     "Would you like to run the following command? $ rm -rf build ▌ Yes (y)  No (n)"),
    ("Allow command `git push`?", "Allow command `git push`?"),
    ("[sudo] password for ci: ", "[sudo] password for ci:"),
])
def test_known_prompts_are_questions(output, question):
    assert question_in(output) == question


@pytest.mark.parametrize("output", [
    "",
    "running 120 tests\ntest_login ... ok\n",
    # A question long past, then work: the prompt is no longer the last thing it said.
    "Continue? [y/N] y\nstep 1\nstep 2\nstep 3\nstep 4\nstep 5\nstep 6\nstep 7\n",
    "How does the parser handle unicode?\nLooking at src/parse.py\n",
    '{"type":"assistant","message":{"content":[{"type":"text","text":"fixed it"}]}}\n',
])
def test_ordinary_output_is_not_a_question(output):
    assert question_in(output) is None


def test_a_roles_own_pattern_makes_a_question():
    assert question_in("Select a region [1-3]: ") is None
    assert question_in("Select a region [1-3]: ", [r"select a region"]) == "Select a region [1-3]:"


def test_a_single_line_repeated_is_a_loop_once_it_repeats_enough_times():
    lines = RepeatedLines(repeats=5, window=60)
    found = [lines.feed("still waiting", now=float(i)) for i in range(5)]
    assert found[:4] == [None] * 4
    assert found[4] and "still waiting" in found[4]


def test_a_block_of_lines_repeated_is_a_loop_and_the_block_is_named():
    lines = RepeatedLines(repeats=4, window=60)
    block = ["$ make test", "error: missing header foo.h", "retrying"]
    found = [lines.feed(line, 0.0) for _ in range(4) for line in block]
    assert found[-1] is not None and found[:-1] == [None] * 11
    assert "$ make test\nerror: missing header foo.h\nretrying" in found[-1]


def test_a_repeat_slower_than_the_window_is_not_a_loop():
    lines = RepeatedLines(repeats=5, window=10)
    # The same line every 5 s: 20 s for five of them, longer than the 10 s window.
    assert all(lines.feed("polling CI", now=5.0 * i) is None for i in range(50))


def test_progress_that_changes_is_never_a_loop():
    lines = RepeatedLines(repeats=20, window=120)
    output = []
    for module in range(200):
        output += ["=" * 30, "collecting", "=" * 30]
        output += [f"test_{module}_{case} PASSED" for case in range(10)]
        output += ["waiting for db"] * 10 + ["", f"{module} done"]
    assert all(lines.feed(line, 1.0) is None for line in output)


def test_the_same_tool_call_in_a_row_is_a_loop_and_a_different_one_breaks_the_row():
    calls = RepeatedCalls(repeats=3)
    assert calls.feed("Bash", {"command": "ls"}) is None
    assert calls.feed("Bash", {"command": "ls"}) is None
    assert calls.feed("Read", {"file_path": "a.py"}) is None  # the row starts over
    assert calls.feed("Bash", {"command": "ls"}) is None
    assert calls.feed("Bash", {"command": "ls"}) is None
    found = calls.feed("Bash", {"command": "ls"})
    assert found and 'Bash {"command": "ls"}' in found


def test_a_loop_needs_at_least_two_repeats():
    with pytest.raises(ValueError):
        RepeatedLines(repeats=1, window=1)
