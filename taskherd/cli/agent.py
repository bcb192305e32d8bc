"""Commands an agent runs from inside its run: `taskherd heartbeat|done|fail|block`.

They hold no database: they reach the daemon that started the agent through its agent
socket (TASKHERD_HOME) with the run's credential (TASKHERD_RUN_TOKEN), both set at spawn.
"""

from __future__ import annotations

from typing import Any

import click

from taskherd.agent import door as agent_door
from taskherd.cli.door import call_door


@click.command("heartbeat")
@click.option("--progress", help="A short note on how far the work is.")
def heartbeat_command(progress: str | None) -> None:
    """Tell the daemon this run is alive (and optionally how far it is)."""
    call_door("heartbeat", {"progress": progress})


def _report(verdict: str, doc: str) -> None:
    @click.command(verdict, help=doc)
    @click.option("--summary", "-s", help="What was done, or why not.")
    @click.option("--cost-usd", type=float,
                  help="What the run cost, in dollars (unknown if omitted).")
    @click.option("--input-tokens", type=int, help="Input tokens the run used.")
    @click.option("--output-tokens", type=int, help="Output tokens the run used.")
    def command(summary: str | None, **usage: Any) -> None:
        args = {"verdict": verdict, "summary": summary}
        args |= {key: value for key, value in usage.items() if value is not None}
        result = call_door("report", args)
        click.echo(f"run {result.get('run_id')}: reported {verdict}")

    REPORT_COMMANDS.append(command)


REPORT_COMMANDS: list[click.Command] = []
_report("done", "Report this run's task as done; it settles when the agent exits.")
_report("fail", "Report that this run failed (a strike); it settles when the agent exits.")
_report("block", "Report that this task needs a human; it settles when the agent exits.")


@click.command("mcp")
def mcp_command() -> None:
    """Serve this agent's run as MCP tools over stdio (started inside a run, e.g. by Claude
    Code through --mcp-config)."""
    from taskherd.agent.mcp import McpUnavailable, serve

    try:
        serve()
    except McpUnavailable as error:
        raise click.UsageError(str(error)) from error


def _verdict(verdict: str, doc: str) -> click.Command:
    @click.command(verdict, help=doc)
    @click.argument("task_id", type=int, required=False)
    @click.option("--reason", help="What must change (required to reject).")
    @click.pass_context
    def command(ctx: click.Context, task_id: int | None, reason: str | None) -> None:
        if agent_door.inside_run() and task_id is None:
            result = call_door("review", {"verdict": verdict, "reason": reason})
            task = result["task"]
            click.echo(f"task {task['id']} is now {task['state']}")
            return
        if task_id is None:
            raise click.UsageError(f"give the task's id: `taskherd {verdict} ID` (inside a "
                                   "reviewer's run, the id is the one it reviews)")
        from taskherd.cli.tasks import person_transition

        person_transition(ctx, verdict, task_id, reason, as_json=False)

    return command


VERDICT_COMMANDS = [
    _verdict("approve", "A reviewer's verdict: the task under review is done (then its chain "
                        "fires). Outside a run: `taskherd approve ID`, as `task approve`."),
    _verdict("reject", "A reviewer's verdict: send the task under review back with --reason "
                       "(its next prompt carries it). Outside a run: `taskherd reject ID`."),
]
