"""A Claude Code agent that calls the same tool with the same input again and again is ended
as `looping`: the real CLI against a scripted API on 127.0.0.1 that never stops asking for
the call. And the first model message of a probe after a rate limit lifts its cooldown."""

from __future__ import annotations

from taskherd.model import Outcome, TaskState
from tests.e2e.fake_anthropic import RateLimited, ToolUse
from tests.fleet import Fleet


def claude_fleet(tmp_path, claude_cli, api, extra: str = "") -> Fleet:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = api.client_env(str(home)) | {"CLAUDE_CODE_MAX_RETRIES": "0"}
    env_table = "{ " + ", ".join(f'{k} = "{v}"' for k, v in env.items()) + " }"
    fleet = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        timezone = "UTC"
        max_concurrent = 3
        path = "/usr/local/bin:/usr/bin:/bin"

        [roles.coder]
        runtime = "claude"
        binary = "{claude_cli}"
        allowed_tools = ["Bash"]
        workdir = "{tmp_path}"
        env = {env_table}
        max_attempts = 1
        {extra}
    """)
    fleet.up()
    return fleet


def test_the_same_tool_call_again_and_again_is_a_loop(tmp_path, claude_cli, start_fake_anthropic):
    api = start_fake_anthropic([], after_script=ToolUse("Bash", {"command": "git status",
                                                               "description": "check"}))
    fleet = claude_fleet(tmp_path, claude_cli, api, "loop_repeats = 4")
    try:
        task = fleet.add("fix it", role="coder", prompt="fix the build")
        dead = fleet.wait_final(task.id, timeout=90)
        [run] = fleet.store.runs_of_task(task.id)
        assert run.outcome is Outcome.LOOPING
        assert dead.state is TaskState.DEAD
        assert 'the same tool call repeated 4 times in a row' in dead.last_error
        assert '"command": "git status"' in dead.last_error
    finally:
        fleet.close()


def test_a_probes_first_model_message_lets_the_rest_start(tmp_path, claude_cli,
                                                          start_fake_anthropic):
    # One 429 (retry after 2 s) pauses the runtime; then every call gets a slow answer: the
    # probe's first model message must release the others before the probe finishes.
    api = start_fake_anthropic([RateLimited(retry_after_seconds=2)],
                               after_script=ToolUse("Bash", {"command": "sleep 3",
                                                             "description": "work"}))
    fleet = claude_fleet(tmp_path, claude_cli, api, 'timeout = "10s"')
    try:
        first = fleet.add("first", role="coder", prompt="one")
        fleet.wait_until(lambda: fleet.store.all_cooldowns(), timeout=60, what="the cooldown")
        others = [fleet.add(f"other {i}", role="coder", prompt="two") for i in range(2)]
        fleet.wait_until(lambda: all(fleet.store.runs_of_task(t.id) for t in others),
                         timeout=90, what="the others to start")
        runs = sorted((r for t in [first, *others] for r in fleet.store.runs_of_task(t.id)),
                      key=lambda r: r.claimed_at)
        limited, probe, *rest = runs
        assert limited.outcome is Outcome.RATE_LIMITED
        assert probe.claimed_at >= limited.ended_at
        # Released by the probe's first model message, not by its end.
        assert all(r.claimed_at > probe.claimed_at for r in rest)
        assert all(probe.ended_at is None or r.claimed_at < probe.ended_at for r in rest)
        assert fleet.store.all_cooldowns() == []
    finally:
        fleet.close()
