"""What an agent reports of its run, through every door it has: the CLI over the agent socket,
the CLI over HTTP (an agent on another host), and the MCP tools. The first report of a run
stands (a later one is refused and changes nothing), an argument too large for the door is
refused with a message saying so, and the MCP tools say what they take."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskherd import __version__
from taskherd.agent import door as agent_door
from taskherd.agent.door import AgentDoor
from taskherd.config import load_config
from taskherd.model import NewTask
from taskherd.ops import Queue
from taskherd.policy.admission import ClaimRequest
from taskherd.store import open_store
from tests.api_server import served

NOW = 1000.0


def open_run(store, token: str) -> int:
    store.enqueue(NewTask(role="coder", title="build"), NOW)
    run = store.claim(ClaimRequest("n1", NOW, 60.0, roles=["coder"])).run
    store.mark_spawned(run.id, NOW, 60.0, pid=1, pid_started_at=1.0, log_path="l")
    store.issue_run_credential(run.id, token, NOW)
    return run.id


@contextlib.contextmanager
def socket_door(tmp_path: Path) -> Iterator[tuple[Queue, dict[str, str]]]:
    """A daemon's agent door, serving from a thread; the env of an agent of one open run."""
    (tmp_path / "taskherd.toml").write_text(
        '[daemon]\ndata_dir = "data"\n[roles.coder]\ncommand = ["true"]\n')
    config = load_config(tmp_path / "taskherd.toml")
    store = open_store(str(tmp_path / "q.db"))
    queue = Queue(config, store)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    loop = asyncio.new_event_loop()
    door = AgentDoor(queue, lambda: NOW + 1)
    loop.run_until_complete(door.start(data_dir))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield queue, {"TASKHERD_RUN_TOKEN": "run-token", "TASKHERD_HOME": str(data_dir),
                      "TASKHERD_REPORT_WAIT": "0"}
    finally:
        asyncio.run_coroutine_threadsafe(door.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        store.close()


def agent_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    return subprocess.run([sys.executable, "-m", "taskherd", *args], env=clean | env,
                          capture_output=True, text=True, timeout=60, check=False)


def assert_first_report_stands(store, run_id: int, later: list) -> None:
    for answer in later:
        assert answer.returncode == 1, answer
        assert "already reported 'done'" in answer.stderr and "first report" in answer.stderr
    run = store.get_run(run_id)
    assert (run.report, run.report_summary) == ("done", "shipped")


def test_the_cli_over_the_socket_keeps_the_first_report(tmp_path):
    with socket_door(tmp_path) as (queue, env):
        run_id = open_run(queue.store, "run-token")
        first = agent_cli(env, "done", "--summary", "shipped")
        assert first.returncode == 0, first.stderr
        again = agent_cli(env, "done", "--summary", "shipped")  # the same again: fine
        assert again.returncode == 0, again.stderr
        later = [agent_cli(env, "fail", "--summary", "oops"), agent_cli(env, "block")]
        assert_first_report_stands(queue.store, run_id, later)


def test_the_cli_over_http_keeps_the_first_report(tmp_path):
    with served(tmp_path) as api:
        run_id = open_run(api.queue.store, "run-token")
        # No agent socket where its home says: the command goes to the URL.
        env = {"TASKHERD_RUN_TOKEN": "run-token", "TASKHERD_URL": api.url,
               "TASKHERD_HOME": str(tmp_path / "elsewhere"), "TASKHERD_REPORT_WAIT": "0"}
        first = agent_cli(env, "done", "--summary", "shipped")
        assert first.returncode == 0, first.stderr
        later = [agent_cli(env, "fail", "--summary", "oops"), agent_cli(env, "block")]
        assert_first_report_stands(api.queue.store, run_id, later)


def test_a_request_over_the_size_limit_is_refused_saying_so(tmp_path):
    with socket_door(tmp_path) as (queue, env):
        open_run(queue.store, "run-token")
        big = "x" * (agent_door.MAX_REQUEST + 1)
        with pytest.raises(agent_door.DoorError) as refused:
            agent_door.call("msg_send", {"to": "coder", "body": big}, env=env)
        assert refused.value.kind == "bad_input"
        assert f"at most {agent_door.MAX_REQUEST} are accepted" in str(refused.value)
        assert queue.store.sent_messages("task:1") == []


# -- MCP ---------------------------------------------------------------------------------


async def _mcp_session(env: dict[str, str], steps):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    clean = {k: v for k, v in os.environ.items() if not k.startswith("TASKHERD_")}
    server = StdioServerParameters(command=sys.executable, args=["-m", "taskherd", "mcp"],
                                   env=clean | env)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        hello = await session.initialize()
        return hello, await steps(session)


def mcp(env: dict[str, str], steps):
    return asyncio.run(asyncio.wait_for(_mcp_session(env, steps), 60))


def text_of(result) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def test_mcp_tools_keep_the_first_report_and_say_what_they_take(tmp_path):
    pytest.importorskip("mcp")

    async def steps(session):
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        calls = [await session.call_tool("done", {"summary": "shipped"}),
                 await session.call_tool("fail", {"summary": "oops"}),
                 await session.call_tool("block", {}),
                 await session.call_tool("done", {"summary": "shipped", "cost": 3}),
                 await session.call_tool("msg_send", {"to": "coder", "body": "hi",
                                                      "kind": "gossip"}),
                 # A prompt has no bound of its own: the door's size limit holds it.
                 await session.call_tool("add_task", {"title": "t", "role": "coder",
                                                      "prompt": "x" * 5_000_000})]
        return tools, calls

    with socket_door(tmp_path) as (queue, env):
        run_id = open_run(queue.store, "run-token")
        hello, (tools, calls) = mcp(env, steps)
        store = queue.store
        run = store.get_run(run_id)
        tasks = store.list_tasks()
    assert hello.server_info.version == __version__
    assert all(tool.input_schema.get("additionalProperties") is False for tool in tools.values())
    send = tools["msg_send"].input_schema["properties"]
    assert set(_enum(send["kind"])) == {"text", "task", "result", "status"}
    assert set(_enum(send["priority"])) == {"normal", "high", "urgent"}
    memory = tools["memory_add"].input_schema["properties"]
    assert memory["shared"]["type"] == "boolean"
    assert set(_enum(memory["section"])) == {"Mistakes", "Learnings", "Feedback", "Session log"}
    assert tools["msg_inbox"].input_schema["properties"]["limit"]["maximum"] == 1000
    done, fail, block, unknown_argument, wrong_kind, too_big = calls
    assert not done.is_error
    for later in (fail, block):
        assert later.is_error and "first report of a run stands" in text_of(later), text_of(later)
    assert (run.report, run.report_summary) == ("done", "shipped")
    assert unknown_argument.is_error and "cost" in text_of(unknown_argument)
    assert wrong_kind.is_error and "gossip" in text_of(wrong_kind)
    assert too_big.is_error and "Broken pipe" not in text_of(too_big)
    assert f"at most {agent_door.MAX_REQUEST} are accepted" in text_of(too_big), text_of(too_big)
    assert len(tasks) == 1  # the child was not added


def _enum(schema: dict) -> list:
    """The values of an enum, however pydantic wrote it (directly, or within anyOf)."""
    if "enum" in schema:
        return schema["enum"]
    return [value for option in schema.get("anyOf", []) for value in option.get("enum", [])]
