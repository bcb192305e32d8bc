"""The live board (`status --watch`, `make demo`): a Claude Code agent's last line reads as
text, not as a JSON event, and an agent's progress note stands before it."""

from __future__ import annotations

import json

from taskherd.ops.views import Board, RunningAgent, board_lines, last_line


def test_a_claude_runs_last_line_is_its_text(tmp_path):
    log = tmp_path / "run-1.log"
    events = [
        {"type": "system", "subtype": "init", "session_id": "s"},
        {"type": "assistant", "message": {"content": [
            {"type": "tool_use", "name": "Bash", "input": {"command": "pytest -q"}}]}},
        {"type": "stream_event", "event": {"delta": "x"}},  # noise: skipped
    ]
    log.write_text('# taskherd {"run": 1}\n' + "".join(json.dumps(e) + "\n" for e in events))
    assert last_line(log) == "→ Bash: pytest -q"


def test_a_plain_agents_last_line_and_its_progress_note(tmp_path):
    log = tmp_path / "run-2.log"
    log.write_text('# taskherd {"run": 2}\nstep 1\nstep 2 of 5\n\n')
    agent = RunningAgent(2, 123, "coder", 7, "fix the login", last_line(log), "2 of 5 files")
    lines = board_lines(Board({"running": 1}, (agent,)), width=200)
    assert lines[1].endswith("| [2 of 5 files] step 2 of 5")
