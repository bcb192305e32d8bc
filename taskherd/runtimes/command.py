"""The `command` runtime: any program, started from the role's argv template."""

from __future__ import annotations

from taskherd.config import RoleConfig
from taskherd.model import Run, Task
from taskherd.runtimes.base import CommandLineRuntime, Launch, RunFiles

PLACEHOLDERS = ("task_id", "run_id", "role", "prompt_file", "workdir")


class TemplateError(ValueError):
    pass


def fill_argv(template: tuple[str, ...], values: dict[str, str]) -> list[str]:
    """Replace {name} placeholders in each argv item; task data never meets a shell."""
    argv = []
    for item in template:
        try:
            argv.append(item.format_map(values))
        except (KeyError, ValueError, IndexError) as error:
            accepted = ", ".join("{" + name + "}" for name in PLACEHOLDERS)
            raise TemplateError(
                f"command item {item!r}: {error} (placeholders: {accepted})"
            ) from error
    return argv


class CommandRuntime(CommandLineRuntime):
    name = "command"

    def launch(self, role: RoleConfig, task: Task, run: Run, files: RunFiles,
               prompt: str) -> Launch:
        files.prompt.write_text(prompt)
        values = {
            "task_id": str(task.id),
            "run_id": str(run.id),
            "role": run.role,
            "prompt_file": str(files.prompt),
            "workdir": role.workdir or "",
        }
        argv = fill_argv(role.command, values)
        if role.prompt_via == "arg":
            argv.append(prompt)
        stdin = files.prompt if role.prompt_via == "stdin" else None
        return Launch(argv, dict(role.env), role.workdir, stdin)
