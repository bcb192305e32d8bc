"""Claude Code uses taskherd as MCP tools: the real CLI, started by the real daemon for a
role with `mcp = true`, calls `msg_send` and `done` through `taskherd mcp` (scripted by the
fake Messages API); the message row and the task's settled state are checked in the store."""

from __future__ import annotations

import json

from taskherd.model import TaskState
from tests.e2e.fake_anthropic import Text, ToolUse
from tests.e2e.test_claude_daemon import toml_table
from tests.fleet import Fleet


def test_claude_sends_a_message_and_reports_done_through_mcp(tmp_path, claude_cli,
                                                             start_fake_anthropic):
    api = start_fake_anthropic([
        ToolUse("mcp__taskherd__msg_send", {"to": "qa", "body": "login fixed, please verify",
                                            "kind": "status", "priority": "high"}),
        ToolUse("mcp__taskherd__done", {"summary": "fixed the login bug via MCP"}),
        Text("All done."),
    ])
    home = tmp_path / "home"
    home.mkdir()
    env = api.client_env(str(home)) | {"CLAUDE_CODE_MAX_RETRIES": "1"}
    fleet = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        data_dir = "data"
        path = "/usr/local/bin:/usr/bin:/bin"
        [roles.coder]
        runtime = "claude"
        binary = "{claude_cli}"
        mcp = true
        workdir = "{tmp_path}"
        env = {toml_table(env)}
        max_attempts = 1
        [roles.qa]
        command = ["true"]
    """)
    try:
        fleet.up()
        task = fleet.add("fix login", role="coder", prompt="Fix the login bug, then tell qa.")
        done = fleet.wait_final(task.id, timeout=90)
        results = api.tool_results()
        assert done.state is TaskState.COMPLETED, (done, results)
        assert done.summary == "fixed the login bug via MCP", results
        assert len(results) == 2 and not any(r.get("is_error") for r in results), results
        [message] = fleet.store.sent_messages(f"task:{task.id}")
        assert (message.recipient, message.body, message.kind, message.priority,
                message.sender_role) == ("qa", "login fixed, please verify", "status", 1,
                                         "coder")
        [run] = fleet.store.runs_of_task(task.id)
        assert run.report == "done" and message.sender_run_id == run.id
        config = json.loads((fleet.data_dir / "logs" / f"run-{run.id}.mcp.json").read_text())
        server = config["mcpServers"]["taskherd"]
        assert server["env"]["TASKHERD_RUN_TOKEN"] == "${TASKHERD_RUN_TOKEN}"  # no secret
        assert server["args"] == ["-m", "taskherd", "mcp"]
    finally:
        fleet.close()
