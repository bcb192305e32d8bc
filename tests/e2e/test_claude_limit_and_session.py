"""What a Claude Code run must not misread, the real daemon running the real CLI against a
scripted Anthropic API on 127.0.0.1: work done, then a usage limit, is a success that still
pauses the runtime (for no longer than max_rate_limit_pause); a session id in the agent's
output that is no session id never reaches the retry's argv."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from taskherd.model import Outcome, TaskState
from taskherd.runtimes.sessions import valid_session_id
from tests.e2e.fake_anthropic import RateLimited, Text, ToolUse
from tests.fleet import Fleet

RESET_2030 = 1893456000


@pytest.fixture
def fleets():
    started: list[Fleet] = []
    yield started
    for fleet in started:
        fleet.close()


def claude_fleet(tmp_path, fleets, binary, api, role_extra: str = "") -> Fleet:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = api.client_env(str(home)) | {"CLAUDE_CODE_MAX_RETRIES": "1"}
    env_table = "{ " + ", ".join(f'{k} = "{v}"' for k, v in env.items()) + " }"
    fleets.append(fleet := Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        path = "/usr/local/bin:/usr/bin:/bin"
        max_rate_limit_pause = "2h"

        [roles.coder]
        runtime = "claude"
        binary = "{binary}"
        allowed_tools = ["Bash"]
        workdir = "{tmp_path}"
        env = {env_table}
        backoff = "0.5s"
        {role_extra}
    """))
    fleet.up()
    return fleet


def test_task_complete_then_a_usage_limit_succeeds_with_its_cost_and_pauses_the_runtime(
        tmp_path, fleets, claude_cli, start_fake_anthropic):
    # The agent says it is done, runs one more command, and its next call meets a plan's
    # usage limit that names a reset in 2030: Claude Code retries once (api_retry), then
    # ends with an is_error result and exit 1.
    api = start_fake_anthropic(
        [ToolUse("Bash", {"command": "echo hi"}, text_before="Fixed it.\nTASK_COMPLETE: fixed")],
        after_script=RateLimited(retry_after_seconds=0,
                                 message=f"Claude AI usage limit reached|{RESET_2030}"))
    fleet = claude_fleet(tmp_path, fleets, claude_cli, api)
    task = fleet.add("fix", role="coder", prompt="fix it")
    done = fleet.wait_final(task.id, timeout=60)
    [run] = fleet.store.runs_of_task(task.id)
    assert (done.state, run.outcome, done.summary) == (TaskState.COMPLETED, Outcome.SUCCEEDED,
                                                       "fixed")
    assert run.exit_code == 1 and done.attempts == 0
    assert run.cost_usd and run.cost_usd > 0 and run.input_tokens and run.output_tokens
    assert valid_session_id(run.session_id)
    # The runtime is paused all the same, for max_rate_limit_pause and not until 2030.
    [cooldown] = fleet.store.active_cooldowns(time.time())
    assert cooldown.runtime == "claude" and cooldown.until == cooldown.created_at + 7200
    assert "max_rate_limit_pause (7200s)" in fleet.daemon_log.read_text()


def test_a_hostile_session_id_never_reaches_the_retrys_argv(tmp_path, fleets, claude_cli,
                                                             start_fake_anthropic):
    # Not valid JSON: a Claude Code that read it as its MCP config would refuse to start.
    mcp_config = tmp_path / "x.json"
    mcp_config.write_text("{ not json")
    hostile = f"--mcp-config={mcp_config}"
    first_attempt = tmp_path / "first.jsonl"
    first_attempt.write_text("".join(json.dumps(event) + "\n" for event in [
        {"type": "system", "subtype": "init", "session_id": hostile},
        {"type": "result", "subtype": "success", "is_error": True, "result": "boom",
         "session_id": hostile, "total_cost_usd": 0.01}]))
    # The first attempt prints a stream that names the hostile id as its session; the retry
    # is the real CLI, started with whatever argv the daemon built.
    wrapper = tmp_path / "claude"
    wrapper.write_text(f"""#!/bin/sh
printf '%s\\n' "$@" > {tmp_path}/argv-$TASKHERD_RUN_ID
if [ ! -e {tmp_path}/first-done ]; then
    touch {tmp_path}/first-done
    cat {first_attempt}
    exit 1
fi
exec {claude_cli} "$@"
""")
    wrapper.chmod(0o755)
    api = start_fake_anthropic([], after_script=Text("TASK_COMPLETE: started afresh"))
    fleet = claude_fleet(tmp_path, fleets, wrapper, api, "resume = true\nmax_attempts = 2")
    task = fleet.add("retry", role="coder", prompt="do it")
    done = fleet.wait_final(task.id, timeout=60)
    first, second = fleet.store.runs_of_task(task.id)
    assert (first.outcome, first.session_id) == (Outcome.FAILED, None)
    assert (done.state, second.outcome) == (TaskState.COMPLETED, Outcome.SUCCEEDED)
    argv = (tmp_path / f"argv-{second.id}").read_text().splitlines()
    assert not any("--resume" in item or str(mcp_config) in item for item in argv)
    assert "MCP" not in Path(second.log_path).read_text()
    assert "its output named '--mcp-config=" in fleet.daemon_log.read_text()
