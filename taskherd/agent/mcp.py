"""`taskherd mcp`: the Model Context Protocol over stdio, for an agent's own run.

A door like the CLI's agent commands: it holds the run's credential (TASKHERD_RUN_TOKEN)
and the daemon's folder (TASKHERD_HOME), never the database, and every tool is one request
to the daemon's agent socket (`agent_door`), where `ops/` applies the same rules as
everywhere. A `claude` role with `mcp = true` gets this server in its `--mcp-config`.

The `mcp` package is an optional extra (`pip install 'taskherd[mcp]'`), imported here only.
"""

# No `from __future__ import annotations`: the tools' annotations name types made inside
# `_add_tools` (the mcp package reads them when a tool is added), so they are evaluated there.
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from taskherd import __version__
from taskherd.agent import door as agent_door

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

    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__)
    _add_tools(server, ask)
    for tool in server._tool_manager.list_tools():
        # An argument a tool does not take is refused, never dropped without a word (the
        # package's argument models ignore extras, and its schemas allow them).
        arguments = tool.fn_metadata.arg_model
        arguments.model_config["extra"] = "forbid"
        arguments.model_rebuild(force=True)
        tool.parameters = arguments.model_json_schema(by_alias=True)
    return server


def _add_tools(server: Any, ask: Callable[[str, dict[str, Any]], dict[str, Any]]) -> None:
    """Every tool, its arguments bounded as the daemon bounds them (`ops`)."""
    from typing import Annotated, Literal

    from pydantic import Field

    from taskherd.ops.agent import MAX_NOTE
    from taskherd.ops.memory import MAX_TEXT
    from taskherd.ops.messages import KINDS, MAX_BODY, MAX_LIST, PRIORITY_NAMES
    from taskherd.policy.memory_file import SECTIONS
    from taskherd.policy.taskspec import TITLE_LIMIT

    Note = Annotated[str | None, Field(max_length=MAX_NOTE)]
    if TYPE_CHECKING:  # text to mypy, which cannot read a Literal made from a tuple's values
        Kind: TypeAlias = str
        Priority: TypeAlias = str
        Section: TypeAlias = str
    else:  # the values the mcp package shows the agent and holds its arguments to
        # system is taskherd's own; spawn has its own tool (add_task).
        Kind = Literal[tuple(k for k in KINDS if k not in ("system", "spawn"))]
        Priority = Literal[tuple(PRIORITY_NAMES)]
        Section = Literal[SECTIONS]

    @server.tool(description="Tell taskherd this run is alive, with a short progress note.")
    def heartbeat(progress: Note = None) -> dict[str, Any]:
        return ask("heartbeat", {"progress": progress})

    def report(verdict: str, summary: str | None) -> dict[str, Any]:
        return ask("report", {"verdict": verdict, "summary": summary})

    @server.tool(description="Report this task as done, with a summary of what was done. "
                             "The run settles when you exit. The first report of a run "
                             "stands: a later done, fail or block is refused.")
    def done(summary: Note = None) -> dict[str, Any]:
        return report("done", summary)

    @server.tool(description="Report that this task failed (it may be retried), saying why.")
    def fail(summary: Note = None) -> dict[str, Any]:
        return report("fail", summary)

    @server.tool(description="Report that this task needs a person before it can go on, "
                             "saying what they must decide.")
    def block(summary: Note = None) -> dict[str, Any]:
        return report("block", summary)

    @server.tool(description="Add a follow-up task (a child of this one) for a role.")
    def add_task(title: Annotated[str, Field(min_length=1, max_length=TITLE_LIMIT)],
                 role: Annotated[str, Field(min_length=1)], prompt: str | None = None,
                 priority: Literal["P0", "P1", "P2", "P3"] | None = None) -> dict[str, Any]:
        task = {"title": title, "role": role, "prompt": prompt, "priority": priority}
        return ask("add_child_task", {"task": {k: v for k, v in task.items() if v is not None}})

    @server.tool(description="Send a message to a role, to one task (task:ID) or to @all. "
                             "reply_to: the id of the message this answers.")
    def msg_send(to: Annotated[str, Field(min_length=1)],
                 body: Annotated[str, Field(min_length=1, max_length=MAX_BODY)],
                 kind: Kind = "text", priority: Priority = "normal",
                 reply_to: Annotated[int, Field(ge=1)] | None = None) -> dict[str, Any]:
        return ask("msg_send", {"to": to, "body": body, "kind": kind, "priority": priority,
                                "reply_to": reply_to})

    @server.tool(description="Unread messages to this role and this task, urgent first.")
    def msg_inbox(limit: Annotated[int, Field(ge=1, le=MAX_LIST)] = 20) -> dict[str, Any]:
        return ask("msg_inbox", {"limit": limit})

    @server.tool(description="Mark messages read, by id.")
    def msg_read(ids: Annotated[list[Annotated[int, Field(ge=1)]],
                                Field(min_length=1, max_length=MAX_LIST)]) -> dict[str, Any]:
        return ask("msg_read", {"ids": ids})

    @server.tool(description="Search this role's long-term memory (and the shared one) "
                             "for what earlier runs learnt. Do it before acting.")
    def memory_search(query: Annotated[str, Field(min_length=1)],
                      limit: Annotated[int, Field(ge=1, le=100)] = 5) -> dict[str, Any]:
        return ask("memory_search", {"query": query, "limit": limit})

    @server.tool(description="Remember something for this role's later runs (shared: for "
                             "every role), in one of the memory's sections.")
    def memory_add(text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)],
                   shared: bool = False, section: Section | None = None) -> dict[str, Any]:
        return ask("memory_add", {"text": text, "shared": shared or None, "section": section})

    @server.tool(description="This run's task (title, prompt, attempts) and its parent "
                             "task's title, state and summary.")
    def task_get() -> dict[str, Any]:
        return ask("task_context", {})


def serve() -> None:
    build_server().run("stdio")
