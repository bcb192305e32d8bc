"""A Claude Code run's log reads as text: `task log` and `runs log` render its stream-json
(what the assistant said, one line per tool call and per result, how it ended), `--raw`
prints the events as written, and `--lines` counts readable lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fleet import PYTHON, Fleet, agent

CAPTURED = Path(__file__).parent.parent / "e2e" / "data" / "tool_use_then_complete.jsonl"
READABLE = [
    "Running it.",
    "→ Bash: echo hi",
    "← hi",
    "All good.",
    "TASK_COMPLETE: done",
]


@pytest.fixture
def finished_run(tmp_path):
    program = agent(tmp_path, "replay", """
        import sys
        sys.stdout.buffer.write(open(sys.argv[1], "rb").read())
    """)
    fleet = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"

        [roles.worker]
        command = ["{PYTHON}", "-S", "{program}", "{CAPTURED}"]
        workdir = "{tmp_path}"
    """)
    fleet.up()
    try:
        task = fleet.add("replay a Claude Code run")
        fleet.wait_final(task.id)
        yield fleet, task
    finally:
        fleet.close()


def test_task_log_renders_stream_json_as_text(finished_run):
    fleet, task = finished_run
    shown = fleet.cli("task", "log", str(task.id)).stdout
    lines = shown.splitlines()
    for wanted in READABLE:
        assert wanted in lines
    assert lines.index("→ Bash: echo hi") < lines.index("← hi") < lines.index("All good.")
    assert lines[-1].startswith("= result (done, 2 turns, $0.0024)")
    assert not any(line.startswith("{") for line in lines), "an event was printed raw"


def test_raw_prints_the_events_as_written(finished_run):
    fleet, task = finished_run
    shown = fleet.cli("task", "log", str(task.id), "--raw").stdout.splitlines()
    events = [json.loads(line) for line in shown if line.startswith("{")]
    assert [event["type"] for event in events][0] == "system"
    assert events[-1]["type"] == "result"
    assert len(events) == len(CAPTURED.read_text().splitlines())


def test_lines_counts_readable_lines_and_runs_log_renders_too(finished_run):
    fleet, task = finished_run
    last_two = fleet.cli("task", "log", str(task.id), "-n", "2").stdout.splitlines()
    assert last_two[0] == "TASK_COMPLETE: done"
    assert last_two[1].startswith("= result (done")
    run_id = fleet.store.runs_of_task(task.id)[-1].id
    assert "→ Bash: echo hi" in fleet.cli("runs", "log", str(run_id)).stdout.splitlines()
