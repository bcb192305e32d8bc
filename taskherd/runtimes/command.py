"""The `command` runtime: any program, started from the role's argv template."""

from __future__ import annotations

from taskherd.model import Run, Task
from taskherd.model.settings import RoleConfig
from taskherd.runtimes.base import CommandLineRuntime, Launch, RunFiles, write_prompt

PLACEHOLDERS = ("task_id", "run_id", "role", "prompt_file", "workdir")
# Linux refuses a single argv string over 128 KiB (MAX_ARG_STRLEN): a longer prompt for a
# prompt_via = "arg" role goes on stdin (and stays in {prompt_file}) instead of failing the run.
MAX_PROMPT_ARG = 100_000


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
        write_prompt(files.prompt, prompt)
        values = {
            "task_id": str(task.id),
            "run_id": str(run.id),
            "role": run.role,
            "prompt_file": str(files.prompt),
            "workdir": role.workdir or "",
        }
        argv = fill_argv(role.command, values)
        stdin = files.prompt if role.prompt_via == "stdin" else None
        if role.prompt_via == "arg":
            # Last, after the command's own '--' (config requires it), so no task text is
            # ever read as one of the program's options.
            if len(prompt.encode()) <= MAX_PROMPT_ARG:
                argv.append(prompt)
            else:
                stdin = files.prompt
        return Launch(argv, dict(role.env), role.workdir, stdin)
