"""The `codex` runtime end to end: the real daemon runs the real Codex CLI (`codex exec
--json`) against a scripted OpenAI Responses API on 127.0.0.1."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from taskherd.model import Outcome, TaskState
from tests.e2e.fake_responses import ApiError, RateLimited, ShellCall, Text, UsageLimit
from tests.fleet import Fleet

# Codex's workspace-write sandbox refuses every socket, the daemon's unix socket too, unless
# the role lets its commands reach the network: `taskherd heartbeat` needs it.
SOCKETS_ALLOWED = ["-c", "sandbox_workspace_write.network_access=true"]
# USD per million tokens, as the config's [prices] gives them.
INPUT, CACHED, OUTPUT = 1.25, 0.125, 10.0


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def toml_table(values: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{key} = {json.dumps(value)}" for key, value in values.items()) + " }"


@pytest.fixture
def codex_fleet(host_dir, codex_cli):
    fleets = []

    def make(api, *, max_concurrent: int = 2, max_attempts: int = 3,
             require_marker: bool = False, resume: bool = False, isolation: str = "") -> Fleet:
        # Outside /tmp, as a real CODEX_HOME is: Codex's own sandbox (bubblewrap, where it is
        # installed) gives its commands a private /tmp, where its helper in CODEX_HOME would
        # not be found; taskherd's box does the same.
        root = host_dir
        home = root / "codex-home"
        home.mkdir(exist_ok=True)
        work = root / "work"
        work.mkdir(exist_ok=True)
        env = api.client_env() | {"CODEX_HOME": str(home), "HOME": str(home)}
        fleet = Fleet(root, f"""
            [daemon]
            database = "q.db"
            data_dir = "data"
            timezone = "UTC"
            max_concurrent = {max_concurrent}
            path = "/usr/local/bin:/usr/bin:/bin"

            [prices."gpt-5-codex"]
            input = {INPUT}
            cached_input = {CACHED}
            output = {OUTPUT}

            [roles.coder]
            runtime = "codex"
            binary = "{codex_cli}"
            model = "gpt-5-codex"
            sandbox = "workspace-write"
            workdir = "{work}"
            args = {toml_list(api.codex_config_args() + SOCKETS_ALLOWED)}
            env = {toml_table(env)}
            max_attempts = {max_attempts}
            backoff = "0.5s"
            require_marker = {str(require_marker).lower()}
            resume = {str(resume).lower()}
            {isolation}
        """)
        fleets.append(fleet)
        fleet.up()
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()


def test_a_tool_call_then_task_complete_with_tokens_cost_and_session(codex_fleet,
                                                                      start_fake_responses):
    api = start_fake_responses([
        ShellCall("taskherd heartbeat --progress 'tests written' && echo beat"),
        Text("All done.\nTASK_COMPLETE: fixed the login bug", input_tokens=3000,
             cached_input_tokens=1000, output_tokens=200),
    ])
    fleet = codex_fleet(api)
    task = fleet.add("fix login", role="coder", prompt="--help Fix the login bug")
    done = fleet.wait_final(task.id, timeout=60)
    assert done.state is TaskState.COMPLETED and done.summary == "fixed the login bug"
    [run] = fleet.store.runs_of_task(task.id)
    assert run.progress == "tests written"  # the heartbeat the tool call sent was seen
    assert "beat" in api.tool_outputs()[0]
    # The prompt reached the model as text, never as an option of the CLI.
    first = api.turn_requests[0].body["input"][-1]["content"][0]["text"]
    assert first.startswith("--help Fix the login bug")
    # Tokens summed over the two model calls (900 + 3000 in, 25 + 200 out), priced per model.
    assert (run.input_tokens, run.output_tokens) == (3900, 225)
    expected = ((3900 - 1000) * INPUT + 1000 * CACHED + 225 * OUTPUT) / 1e6
    assert run.cost_usd == pytest.approx(expected)
    assert run.session_id and len(run.session_id) >= 32
    assert api.turn_requests[0].header("session-id") == run.session_id


def test_codex_runs_inside_taskherds_sandbox(codex_fleet, start_fake_responses, host_dir):
    database = host_dir / "q.db"
    api = start_fake_responses([
        ShellCall(f"taskherd heartbeat --progress boxed && wc -c {database} && echo made > "
                  "made-here && echo beat"),
        Text("All done.\nTASK_COMPLETE: worked in both boxes"),
    ])
    fleet = codex_fleet(api, isolation='isolation = { mode = "bwrap" }')
    task = fleet.add("fix login", role="coder", prompt="Fix the login bug")
    done = fleet.wait_final(task.id, timeout=60)
    assert done.state is TaskState.COMPLETED and done.summary == "worked in both boxes"
    [run] = fleet.store.runs_of_task(task.id)
    assert run.progress == "boxed"  # its door works from inside both
    output = api.tool_outputs()[0]
    assert f"0 {database}" in output and "beat" in output  # an empty file in the box
    assert (host_dir / "work" / "made-here").read_text() == "made\n"  # its workspace writes
    # Codex's own sandbox (bubblewrap too) nests in taskherd's, except as root, where it
    # cannot map its user namespace: then it is relaxed, and taskherd's box is the boundary.
    own = "danger-full-access" if os.geteuid() == 0 else "workspace-write"
    header = json.loads(Path(run.log_path).read_text().splitlines()[0].removeprefix("# taskherd "))
    argv = header["argv"]
    assert argv[0].endswith("bwrap") and argv[argv.index("--sandbox") + 1] == own


def test_an_api_error_fails_the_run_with_the_error_and_retries(codex_fleet,
                                                               start_fake_responses):
    api = start_fake_responses([], after_script=ApiError(400, "unknown parameter: tool_choice"))
    fleet = codex_fleet(api, max_attempts=2)
    task = fleet.add("bad request", role="coder", prompt="x")
    dead = fleet.wait_final(task.id, timeout=60)
    runs = fleet.store.runs_of_task(task.id)
    assert dead.state is TaskState.DEAD and dead.attempts == 2
    assert [r.outcome for r in runs] == [Outcome.FAILED, Outcome.FAILED]
    assert "unknown parameter: tool_choice" in dead.last_error
    assert runs[0].cost_usd is None  # no model call completed: nothing is priced as zero


def test_a_message_without_the_marker_fails_a_role_that_requires_it(codex_fleet,
                                                                    start_fake_responses):
    api = start_fake_responses([], after_script=Text("I looked around and stopped."))
    fleet = codex_fleet(api, max_attempts=1, require_marker=True)
    task = fleet.add("lazy", role="coder", prompt="x")
    dead = fleet.wait_final(task.id, timeout=60)
    [run] = fleet.store.runs_of_task(task.id)
    assert run.outcome is Outcome.FAILED and "without TASK_COMPLETE" in dead.last_error
    assert run.cost_usd is not None and run.cost_usd > 0  # a failed run still cost money


def test_a_usage_limit_is_rate_limited_until_its_reset_and_cools_the_runtime(
        codex_fleet, start_fake_responses):
    # A reset on a whole minute, two hours ahead: Codex prints it as a clock time
    # ("try again at 12:40 PM") in its zone, which the daemon reads back.
    resets_at = (int(time.time()) // 60 + 120) * 60
    api = start_fake_responses([UsageLimit(resets_at=resets_at)],
                               after_script=Text("TASK_COMPLETE: after the limit"))
    fleet = codex_fleet(api, max_concurrent=1)
    first = fleet.add("first", role="coder", prompt="one")
    second = fleet.add("second", role="coder", prompt="two")
    run = fleet.wait_until(lambda: (r := fleet.store.runs_of_task(first.id)) and r[0].ended_at
                           and r[0], timeout=60, what="the limited run to end")
    assert run.outcome is Outcome.RATE_LIMITED and "usage limit" in run.error
    [cooldown] = fleet.store.active_cooldowns(time.time())
    assert cooldown.runtime == "codex" and cooldown.until == resets_at
    task = fleet.store.get_task(first.id)
    assert task.state is TaskState.READY and task.attempts == 0
    reset_clock = datetime.fromtimestamp(resets_at).astimezone()
    assert "codex is rate-limited until" in fleet.cli("status").stdout
    # While it cools down nothing of that runtime starts, over several dispatcher passes.
    passes = fleet.daemon_log.read_text().count("dispatch pass")
    fleet.wait_until(lambda: fleet.daemon_log.read_text().count("dispatch pass") >= passes + 3,
                     what="three more dispatcher passes")
    assert fleet.store.runs_of_task(second.id) == []
    assert reset_clock > datetime.now().astimezone()
    fleet.cli("cooldown", "clear", "codex")
    assert fleet.wait_final(first.id, timeout=60).state is TaskState.COMPLETED
    assert fleet.wait_final(second.id, timeout=60).state is TaskState.COMPLETED


def test_a_429_rate_limit_pauses_the_runtime_with_a_first_guess(codex_fleet,
                                                                start_fake_responses):
    api = start_fake_responses([RateLimited(retry_after="1")],
                               after_script=Text("TASK_COMPLETE: after the limit"))
    fleet = codex_fleet(api, max_concurrent=1)
    task = fleet.add("limited", role="coder", prompt="one")
    run = fleet.wait_until(lambda: (r := fleet.store.runs_of_task(task.id)) and r[0].ended_at
                           and r[0], timeout=60, what="the limited run to end")
    assert run.outcome is Outcome.RATE_LIMITED and "Too Many Requests" in run.error
    [cooldown] = fleet.store.active_cooldowns(time.time())
    # The CLI's text names no reset time: the first pause is a guess of a minute.
    assert cooldown.runtime == "codex" and cooldown.span == 60
    assert fleet.store.get_task(task.id).attempts == 0


def test_a_retry_resumes_the_session_and_counts_only_its_own_tokens(codex_fleet,
                                                                    start_fake_responses):
    api = start_fake_responses([
        Text("I looked and stopped.", input_tokens=1000, cached_input_tokens=0,
             output_tokens=100),
        Text("TASK_COMPLETE: finished on the second go", input_tokens=1500,
             cached_input_tokens=0, output_tokens=50),
    ])
    fleet = codex_fleet(api, require_marker=True, resume=True)
    task = fleet.add("twice", role="coder", prompt="fix it")
    done = fleet.wait_final(task.id, timeout=60)
    assert done.state is TaskState.COMPLETED
    first, second = fleet.store.runs_of_task(task.id)
    assert second.session_id == first.session_id  # the same Codex thread, continued
    # The second request carries the first conversation: it was resumed, not restarted.
    history = api.turn_requests[1].body["input"]
    assert any("I looked and stopped." in json.dumps(item) for item in history)
    # Codex reports the thread's tokens so far; each run keeps its own share.
    assert (first.input_tokens, first.output_tokens) == (1000, 100)
    assert (second.input_tokens, second.output_tokens) == (1500, 50)
    assert second.cost_usd == pytest.approx((1500 * INPUT + 50 * OUTPUT) / 1e6)
