"""The runtimes by name, as roles name them in the config."""

from __future__ import annotations

from taskherd.runtimes.base import Runtime
from taskherd.runtimes.chat import ChatRuntime
from taskherd.runtimes.claude import ClaudeRuntime
from taskherd.runtimes.codex import CodexRuntime
from taskherd.runtimes.command import CommandRuntime

RUNTIMES: dict[str, type[Runtime]] = {
    "command": CommandRuntime,
    "claude": ClaudeRuntime,
    "codex": CodexRuntime,
    "chat": ChatRuntime,
}


def runtime_for(name: str) -> Runtime:
    runtimes = RUNTIMES
    if name not in runtimes:
        raise ValueError(
            f"runtime {name!r} is not available yet (available: {', '.join(runtimes)})"
        )
    return runtimes[name]()
