"""`taskherd mcp`: the Model Context Protocol over stdio, for an agent's own run.

A door like the CLI's agent commands: it holds the run's credential (TASKHERD_RUN_TOKEN)
and the daemon's folder (TASKHERD_HOME), never the database, and every tool is one request
to the daemon's agent socket (`agent_door`), where `ops/` applies the same rules as
everywhere. A `claude` role with `mcp = true` gets this server in its `--mcp-config`.

The `mcp` package is an optional extra (`pip install 'taskherd[mcp]'`), imported here only.
"""

from __future__ import annotations

import os
from typing import Any

from taskherd import agent_door

SERVER_NAME = "taskherd"
INSTRUCTIONS = (
    "Tools for this task's run in taskherd, the queue that started you. Call "
    "memory_search before acting; heartbeat with progress during long work; msg_send to "
    "reach another role (a role name, task:ID or @all); add_task for follow-up work; end "
    "with done (or fail, or block when a person must decide), with a summary."
)


class McpUnavailable(Exception):
    """The server cannot start: the extra is missing, or no run credential is set."""


def build_server() -> Any:
    """The MCP server with every tool, bound to this process's run credential."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError as error:
        raise McpUnavailable("the MCP server needs the mcp package: "
                             "pip install 'taskherd[mcp]'") from error
    if not agent_door.inside_run():
        raise McpUnavailable(f"{agent_door.TOKEN_ENV} is not set: `taskherd mcp` serves one "
                             "agent's run, and is started inside it")
    env = dict(os.environ)

    def ask(op: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return agent_door.call(op, {k: v for k, v in args.items() if v is not None}, env)
        except agent_door.DoorError as error:
            raise ToolError(f"{error.kind}: {error}") from error

    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS)

    @server.tool(description="Tell taskherd this run is alive, with a short progress note.")
    def heartbeat(progress: str | None = None) -> dict[str, Any]:
        return ask("heartbeat", {"progress": progress})

    def report(verdict: str, summary: str | None) -> dict[str, Any]:
        return ask("report", {"verdict": verdict, "summary": summary})

    @server.tool(description="Report this task as done, with a summary of what was done. "
                             "The run settles when you exit.")
    def done(summary: str | None = None) -> dict[str, Any]:
        return report("done", summary)

    @server.tool(description="Report that this task failed (it may be retried), saying why.")
    def fail(summary: str | None = None) -> dict[str, Any]:
        return report("fail", summary)

    @server.tool(description="Report that this task needs a person before it can go on, "
                             "saying what they must decide.")
    def block(summary: str | None = None) -> dict[str, Any]:
        return report("block", summary)

    @server.tool(description="Add a follow-up task (a child of this one) for a role.")
    def add_task(title: str, role: str, prompt: str | None = None,
                 priority: str | None = None) -> dict[str, Any]:
        task = {"title": title, "role": role, "prompt": prompt, "priority": priority}
        return ask("add_child_task", {"task": {k: v for k, v in task.items() if v is not None}})

    @server.tool(description="Send a message to a role, to one task (task:ID) or to @all. "
                             "kind: text, task, result, status; priority: normal, high, "
                             "urgent; reply_to: the id of the message this answers.")
    def msg_send(to: str, body: str, kind: str = "text", priority: str = "normal",
                 reply_to: int | None = None) -> dict[str, Any]:
        return ask("msg_send", {"to": to, "body": body, "kind": kind, "priority": priority,
                                "reply_to": reply_to})

    @server.tool(description="Unread messages to this role and this task, urgent first.")
    def msg_inbox(limit: int = 20) -> dict[str, Any]:
        return ask("msg_inbox", {"limit": limit})

    @server.tool(description="Mark messages read, by id.")
    def msg_read(ids: list[int]) -> dict[str, Any]:
        return ask("msg_read", {"ids": ids})

    @server.tool(description="Search this role's long-term memory (and the shared one) "
                             "for what earlier runs learnt. Do it before acting.")
    def memory_search(query: str, limit: int = 5) -> dict[str, Any]:
        return ask("memory_search", {"query": query, "limit": limit})

    @server.tool(description="Remember something for this role's later runs (shared: for "
                             "every role).")
    def memory_add(text: str, shared: bool = False,
                   section: str | None = None) -> dict[str, Any]:
        return ask("memory_add", {"text": text, "shared": shared or None, "section": section})

    @server.tool(description="This run's task (title, prompt, attempts) and its parent "
                             "task's title, state and summary.")
    def task_get() -> dict[str, Any]:
        return ask("task_context", {})

    return server


def serve() -> None:
    build_server().run("stdio")
