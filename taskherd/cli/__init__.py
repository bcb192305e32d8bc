"""The `taskherd` command: one module per command group, each imported only when used.

An agent calls `taskherd heartbeat` or `done` many times a run, and a person `--version`:
importing every group (the store, the daemon, httpx, croniter, psutil) for each call made
them cost four times a bare click program. `--help` still lists every command.
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any

import click

from taskherd import __version__

# command name → (module, attribute): the order is the order `--help` lists them in
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("taskherd.cli.setup", "init_command"),
    "task": ("taskherd.cli.tasks", "task_group"),
    "status": ("taskherd.cli.status", "status_command"),
    "cooldown": ("taskherd.cli.cooldown", "cooldown_group"),
    "budget": ("taskherd.cli.budget", "budget_group"),
    "up": ("taskherd.cli.daemon", "up_command"),
    "stop": ("taskherd.cli.daemon", "stop_command"),
    "heartbeat": ("taskherd.cli.agent", "heartbeat_command"),
    "msg": ("taskherd.cli.messages", "msg_group"),
    "agents": ("taskherd.cli.agents", "agents_group"),
    "memory": ("taskherd.cli.memory", "memory_group"),
    "alias": ("taskherd.cli.alias", "alias_group"),
    "mcp": ("taskherd.cli.agent", "mcp_command"),
    "jobs": ("taskherd.cli.jobs", "jobs_group"),
    "backup": ("taskherd.cli.backup", "backup_group"),
    "runs": ("taskherd.cli.runs", "runs_group"),
    "reload": ("taskherd.cli.jobs", "reload_command"),
    "import": ("taskherd.cli.imports", "import_command"),
    "export": ("taskherd.cli.imports", "export_command"),
    "service": ("taskherd.cli.service", "service_group"),
    "doctor": ("taskherd.cli.doctor", "doctor_command"),
    "token": ("taskherd.cli.token", "token_group"),
    "done": ("taskherd.cli.agent", "REPORT_COMMANDS"),
    "fail": ("taskherd.cli.agent", "REPORT_COMMANDS"),
    "block": ("taskherd.cli.agent", "REPORT_COMMANDS"),
    "approve": ("taskherd.cli.agent", "VERDICT_COMMANDS"),
    "reject": ("taskherd.cli.agent", "VERDICT_COMMANDS"),
}


# What an agent runs about its own run (with its run's credential), apart in --help.
AGENT_COMMANDS = ("done", "fail", "block", "heartbeat", "approve", "reject", "mcp")


class LazyGroup(click.Group):
    """A group whose commands are imported when invoked (or listed), not at start."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The operator's commands, then the agent's (run inside a run), each with its whole
        first sentence: the terminal's width wraps it, never cuts it."""
        rows = {name: command for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden}
        for title, names in (("Commands", [n for n in rows if n not in AGENT_COMMANDS]),
                             ("Agent commands (inside a run)",
                              [n for n in rows if n in AGENT_COMMANDS])):
            if names:
                with formatter.section(title):
                    formatter.write_dl([(name, rows[name].get_short_help_str(limit=1000))
                                        for name in names])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        found: Any = getattr(importlib.import_module(where[0]), where[1])
        if isinstance(found, list | tuple):  # several commands in one attribute
            found = next(command for command in found if command.name == cmd_name)
        return found


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    type=click.Path(dir_okay=False),
    help="Config file (default: $TASKHERD_CONFIG, else taskherd.toml here or in the nearest "
         "folder above).",
)
@click.option(
    "--busy-timeout",
    type=click.FloatRange(min=0, min_open=True), envvar="TASKHERD_BUSY_TIMEOUT",
    help="Seconds a command waits for a SQLite database another process holds locked "
         "(default 60; also $TASKHERD_BUSY_TIMEOUT).",
)
@click.version_option(__version__, prog_name="taskherd")
@click.pass_context
def cli(ctx: click.Context, config: str | None, busy_timeout: float | None) -> None:
    """taskherd: a durable queue, scheduler and supervisor for fleets of AI agents."""
    ctx.ensure_object(dict)


def main() -> None:
    try:
        cli(prog_name="taskherd")
    except Exception as error:
        # A locked or full database, a lost connection that met no command's own handling:
        # one line and exit 1, not a traceback (a bug still shows its traceback).
        from taskherd.cli.common import EXIT_REFUSED, fault_line

        line = fault_line(error)
        if line is None:
            raise
        click.echo(f"Error: {line}", err=True)
        sys.exit(EXIT_REFUSED)
    finally:
        # The process ends here (click exits at every command's end). The interpreter's
        # shutdown would run the cycle collector over every object still alive (modules,
        # classes, click's), a second each time it clears a part: ~11 ms of a 100 ms
        # `task add`, to free memory the exit frees anyway. Frozen, they are left to it;
        # Python never promised __del__ at exit, and the store closed its database itself.
        gc.freeze()
