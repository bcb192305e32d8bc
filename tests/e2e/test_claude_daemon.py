"""The `claude` runtime end to end: the real daemon runs the real Claude Code CLI against a
scripted Anthropic Messages API on 127.0.0.1."""

from __future__ import annotations

import json
import os
import time

import psutil
import pytest

from taskherd.model import Outcome, TaskState
from tests.e2e.fake_anthropic import ApiError, RateLimited, StopMidStream, Text, ToolUse
from tests.fleet import Fleet


def toml_table(values: dict[str, str]) -> str:
    return "{ " + ", ".join(f'{key} = "{value}"' for key, value in values.items()) + " }"


@pytest.fixture
def claude_fleet(request, tmp_path, claude_cli):
    fleets = []

    def make(api, *, max_concurrent: int = 3, max_attempts: int = 3, idle_timeout: str = "60s",
             extra_env: dict[str, str] | None = None, isolation: str = "") -> Fleet:
        # A boxed agent has a private /tmp: its fleet lives where the host's files do.
        root = request.getfixturevalue("host_dir") if isolation else tmp_path
        home = root / "home"
        home.mkdir(exist_ok=True)
        env = api.client_env(str(home)) | {"CLAUDE_CODE_MAX_RETRIES": "2"} | (extra_env or {})
        fleet = Fleet(root, f"""
            [daemon]
            database = "q.db"
            data_dir = "data"
            timezone = "UTC"
            max_concurrent = {max_concurrent}
            path = "/usr/local/bin:/usr/bin:/bin"

            [roles.coder]
            runtime = "claude"
            binary = "{claude_cli}"
            allowed_tools = ["Bash"]
            workdir = "{root}"
            env = {toml_table(env)}
            max_attempts = {max_attempts}
            backoff = "0.5s"
            idle_timeout = "{idle_timeout}"
            {isolation}
        """)
        fleets.append(fleet)
        fleet.up()
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()


def test_tool_call_heartbeat_then_task_complete(claude_fleet, start_fake_anthropic):
    api = start_fake_anthropic([
        ToolUse("Bash", {"command": "taskherd heartbeat --progress 'tests written'",
                         "description": "tell taskherd we are alive"}),
        Text("All done.\nTASK_COMPLETE: fixed the login bug"),
    ])
    fleet = claude_fleet(api)
    task = fleet.add("fix login", role="coder", prompt="Fix the login bug")
    done = fleet.wait_final(task.id, timeout=60)
    assert done.state is TaskState.COMPLETED and done.summary == "fixed the login bug"
    [run] = fleet.store.runs_of_task(task.id)
    assert run.progress == "tests written"  # the heartbeat the tool call sent was seen
    assert run.session_id and run.turns == 2
    assert run.cost_usd is not None and run.cost_usd > 0
    assert run.input_tokens > 0 and run.output_tokens > 0
    assert api.tool_results() and not api.tool_results()[0].get("is_error")


def test_claude_code_runs_unchanged_inside_taskherds_sandbox(claude_fleet, start_fake_anthropic,
                                                             host_dir):
    database = host_dir / "q.db"
    api = start_fake_anthropic([
        ToolUse("Bash", {"command": f"taskherd heartbeat --progress boxed; wc -c {database}; "
                                    "ls ~/.ssh; echo listed",
                         "description": "report, and look where it must not"}),
        Text("All done.\nTASK_COMPLETE: worked in the box"),
    ])
    (host_dir / "home" / ".ssh").mkdir(parents=True)
    (host_dir / "home" / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    fleet = claude_fleet(api, isolation='isolation = { mode = "bwrap" }')
    task = fleet.add("fix login", role="coder", prompt="Fix the login bug")
    done = fleet.wait_final(task.id, timeout=60)
    assert done.state is TaskState.COMPLETED and done.summary == "worked in the box"
    [run] = fleet.store.runs_of_task(task.id)
    assert run.progress == "boxed"  # its door works from inside
    assert run.session_id and run.cost_usd is not None and run.cost_usd > 0
    [output] = [str(result.get("content")) for result in api.tool_results()]
    assert f"0 {database}" in output  # the database is an empty file in the box
    assert "id_ed25519" not in output and "listed" in output  # ~/.ssh is empty


def test_rate_limit_cools_the_runtime_down_without_a_strike(claude_fleet, start_fake_anthropic):
    api = start_fake_anthropic([RateLimited(retry_after_seconds=60)],
                               after_script=Text("TASK_COMPLETE: after the limit"))
    fleet = claude_fleet(api, max_concurrent=1)
    first = fleet.add("first", role="coder", prompt="one")
    second = fleet.add("second", role="coder", prompt="two")
    cooldown = fleet.wait_until(lambda: fleet.store.active_cooldowns(time.time()),
                                timeout=30, what="a cooldown")[0]
    limited_at = time.time()
    # No reset time in a 429 retry: the first guess is a minute (it doubles if limits repeat).
    assert cooldown.runtime == "claude" and limited_at + 50 < cooldown.until < limited_at + 65
    assert cooldown.span == 60
    run = fleet.wait_until(lambda: (r := fleet.store.runs_of_task(first.id)[-1]).ended_at and r,
                           what="the limited run to end")
    assert run.outcome is Outcome.RATE_LIMITED and run.ended_at - limited_at < 5
    assert not psutil.pid_exists(run.pid)
    task = fleet.store.get_task(first.id)
    assert task.state is TaskState.READY and task.attempts == 0
    status = fleet.cli("status").stdout
    assert "claude is rate-limited until" in status
    # While it cools down nothing of that runtime starts, over several dispatcher passes.
    passes = fleet.daemon_log.read_text().count("dispatch pass")
    fleet.wait_until(lambda: fleet.daemon_log.read_text().count("dispatch pass") >= passes + 3,
                     what="three more dispatcher passes")
    assert fleet.store.runs_of_task(second.id) == []
    assert len(fleet.store.runs_of_task(first.id)) == 1
    fleet.cli("cooldown", "clear", "claude")
    assert fleet.wait_final(first.id, timeout=60).state is TaskState.COMPLETED
    assert fleet.wait_final(second.id, timeout=60).state is TaskState.COMPLETED


def test_the_rate_limit_storm_spawns_one_wave_and_strikes_nothing(claude_fleet,
                                                                  start_fake_anthropic):
    """The seeds' WQ-719 retried 319 times; here 150 tasks meet a 429 wall."""
    api = start_fake_anthropic([], after_script=RateLimited(retry_after_seconds=60))
    fleet = claude_fleet(api, max_concurrent=3)
    tasks = [fleet.store.enqueue(_new(f"storm {i}"), time.time()).task for i in range(150)]
    fleet.wait_until(lambda: fleet.store.active_cooldowns(time.time()), timeout=30,
                     what="the cooldown")
    fleet.wait_until(lambda: not fleet.store.open_runs(), timeout=30, what="the wave to end")
    passes = fleet.daemon_log.read_text().count("dispatch pass")
    fleet.wait_until(lambda: fleet.daemon_log.read_text().count("dispatch pass") >= passes + 3,
                     what="three more dispatcher passes")
    runs = [run for task in tasks for run in fleet.store.runs_of_task(task.id)]
    assert 1 <= len(runs) <= 3
    assert all(run.outcome is Outcome.RATE_LIMITED for run in runs)
    assert all(fleet.store.get_task(t.id).attempts == 0 for t in tasks)
    assert sum(1 for t in tasks if fleet.store.get_task(t.id).state is TaskState.READY) == 150


def test_a_stream_that_stops_is_stalled_and_its_process_group_killed(claude_fleet,
                                                                     start_fake_anthropic):
    api = start_fake_anthropic([StopMidStream(after_events=3)])
    fleet = claude_fleet(api, max_attempts=1, idle_timeout="3s")
    task = fleet.add("hangs", role="coder", prompt="work")
    fleet.wait_final(task.id, timeout=60)
    [run] = fleet.store.runs_of_task(task.id)
    assert run.outcome is Outcome.STALLED
    # The log's last write is the agent's last sign of life: killed within idle_timeout + 2 s.
    last_output = os.stat(run.log_path).st_mtime
    assert run.ended_at - last_output <= 3 + 2
    group = [p for p in psutil.process_iter(["pid"]) if _group_of(p) == run.pid]
    assert group == []  # the CLI and everything it started are gone


def test_an_error_result_strikes_retries_and_ends_dead_with_the_error(claude_fleet,
                                                                      start_fake_anthropic):
    api = start_fake_anthropic([], after_script=ApiError(400, message="unknown field: tool_choice"))
    fleet = claude_fleet(api, max_attempts=2)
    task = fleet.add("too long", role="coder", prompt="x")
    dead = fleet.wait_final(task.id, timeout=90)
    runs = fleet.store.runs_of_task(task.id)
    assert dead.state is TaskState.DEAD and dead.attempts == 2
    assert [r.outcome for r in runs] == [Outcome.FAILED, Outcome.FAILED]
    assert dead.last_error.startswith("API error 400")
    assert runs[1].claimed_at >= runs[0].ended_at + 0.5  # backoff


def _group_of(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid) if process.status() != psutil.STATUS_ZOMBIE else None
    except (ProcessLookupError, psutil.Error):
        return None


def _new(title: str):
    from taskherd.model import NewTask

    return NewTask(role="coder", title=title, prompt=title)


def test_cost_shows_per_run_per_role_and_per_day(claude_fleet, start_fake_anthropic):
    api = start_fake_anthropic([], after_script=Text("TASK_COMPLETE: cheap"))
    fleet = claude_fleet(api)
    tasks = [fleet.add(f"t{i}", role="coder", prompt="p") for i in range(2)]
    for task in tasks:
        fleet.wait_final(task.id, timeout=60)
    total = sum(fleet.store.runs_of_task(t.id)[0].cost_usd for t in tasks)
    status = json.loads(fleet.cli("status", "--json").stdout)
    [coder] = status["cost"]
    assert coder["runs_today"] == 2 and abs(coder["cost_today"] - total) < 1e-9
    assert "cost today" in fleet.cli("status").stdout
    per_day = json.loads(fleet.cli("runs", "cost", "--by", "day", "--json").stdout)
    assert sum(row["runs"] for row in per_day) == 2
    listing = fleet.cli("runs", "list").stdout
    assert "$" in listing and "tokens in/out" in listing
