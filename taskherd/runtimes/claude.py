"""The `claude` runtime: Claude Code in print mode, read through its stream-json output.

Every event is activity; the `result` event gives the outcome, summary, cost, tokens, turns
and session id; an `api_retry` event with status 429 is a rate limit while the run is still
going, so the fleet pauses before Claude Code burns its own retries.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from taskherd.host.procs import ExitStatus
from taskherd.model import Outcome, Run, RunResult, Task
from taskherd.model.settings import RoleConfig
from taskherd.policy.loops import RepeatedCalls
from taskherd.policy.timefmt import reading_zone
from taskherd.runtimes.base import (
    CommandLineRuntime,
    Launch,
    OutputReader,
    RunFiles,
    write_prompt,
)
from taskherd.runtimes.claude_stream import (
    ClaudeEvent,
    ClaudeRunResult,
    ClaudeStreamReader,
    ResultEvent,
)
from taskherd.runtimes.ratelimit import RateLimitSignal, known_reset
from taskherd.runtimes.sessions import shown

log = logging.getLogger("taskherd.supervisor")

SUMMARY_LIMIT = 2000
MCP_SERVER = "taskherd"  # its tools reach Claude as mcp__taskherd__<tool>
# What `taskherd mcp` needs from the agent's environment to reach its daemon as its run.
MCP_ENV = ("TASKHERD_RUN_TOKEN", "TASKHERD_HOME", "TASKHERD_TASK_ID", "TASKHERD_RUN_ID",
           "TASKHERD_ROLE", "TASKHERD_REPORT_WAIT")
# What Claude Code signs in with, besides a login stored in ~/.claude (HOME is carried over).
CLAUDE_AUTH_ENV = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN")


class ClaudeReader(OutputReader):
    def __init__(self, role: RoleConfig):
        super().__init__(role)
        self.stream = ClaudeStreamReader(role.rate_limit_patterns, reading_zone(role.timezone))
        # Every stream-json line carries its own ids, so no two lines repeat: a Claude Code
        # loop shows as the same tool call with the same input, again and again.
        self.calls = RepeatedCalls(role.loop_repeats)

    def feed(self, chunk: bytes, now: float) -> RateLimitSignal | None:
        seen_before = self.stream.rate_limit
        for event in self.stream.feed(chunk, _utc(now)):
            if isinstance(event, ResultEvent):
                self.tail.append(event.run_result.result_text[-SUMMARY_LIMIT:])
            elif event.type == "assistant":
                self.progressed = True  # the model answered: past the provider's limits
                self._note_tool_calls(event)
        self._note_completion()
        return self._fresh_limit(seen_before)

    def _note_completion(self) -> None:
        """A TASK_COMPLETE line in an assistant message or the result: the work is done, and
        the supervisor ends no such run for a limit met afterwards (partial success)."""
        result = self.stream.result
        done = self.stream.completed_summary
        if result is not None and result.declared_complete:
            done = result.summary
        if done is not None:
            self.summary = done or "done"

    def gap(self) -> None:
        self.stream.gap()

    def _note_tool_calls(self, event: ClaudeEvent) -> None:
        if self.looping is not None:
            return
        message = event.data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_use":
                found = self.calls.feed(str(block.get("name")), block.get("input"))
                self.looping = self.looping or found

    def finish(self, now: float) -> RateLimitSignal | None:
        seen_before = self.stream.rate_limit
        self.stream.finish(_utc(now))
        self._note_completion()
        return self._fresh_limit(seen_before)

    def limit_met(self, exit_status: ExitStatus, now: float) -> RateLimitSignal | None:
        result = self.stream.result
        if result is None:
            return super().limit_met(exit_status, now)  # a limit mid-run, or in its last lines
        # A successful result got past any limit met on the way (Claude Code retried it).
        return self.stream.rate_limit if result.is_error else None

    def _fresh_limit(self, seen_before: RateLimitSignal | None) -> RateLimitSignal | None:
        result = self.stream.result
        if result is not None and not result.is_error:
            return None  # the work completed: a limit hit afterwards changes nothing
        if self.stream.rate_limit is not None and seen_before is None:
            self.rate_limit = self.stream.rate_limit
            return self.rate_limit
        return None


class ClaudeRuntime(CommandLineRuntime):
    name = "claude"

    def launch(self, role: RoleConfig, task: Task, run: Run, files: RunFiles,
               prompt: str) -> Launch:
        write_prompt(files.prompt, prompt)
        # The prompt goes on stdin, never in argv: task text (from an import, a job, another
        # agent) that starts with '-' would otherwise be read as Claude Code's own options, and
        # a long prompt would hit the kernel's limit on one argument.
        argv = [role.binary or "claude", "-p", "--output-format", "stream-json", "--verbose"]
        stdin = files.prompt
        if role.agent:
            argv += ["--agent", role.agent]
        if role.model:
            argv += ["--model", role.model]
        allowed = list(role.allowed_tools)
        configs = [role.mcp_config] if role.mcp_config else []
        if role.mcp:
            configs.append(str(_write_mcp_config(files)))
            allowed.append(f"mcp__{MCP_SERVER}")  # every tool of taskherd's own server
        if allowed:
            argv += ["--allowedTools", ",".join(allowed)]
        if role.permission_mode:
            argv += ["--permission-mode", role.permission_mode]
        if configs:
            argv += ["--mcp-config", *configs]
        argv += list(role.args)
        # Agents get an explicit environment: Claude Code's sign-in must be handed over from
        # the daemon's (the service's EnvironmentFile), or every run fails to authenticate.
        signed_in = {key: os.environ[key] for key in CLAUDE_AUTH_ENV if os.environ.get(key)}
        return Launch(argv, signed_in | dict(role.env), role.workdir, stdin)

    def resumed(self, launch: Launch, session: str) -> Launch:
        # `--resume=ID` continues the previous attempt's conversation: the agent keeps what
        # it read and did, and the new prompt (with why it runs again) comes after. One item,
        # never two: after a bare `--resume` (its value is optional) an id that starts with
        # '-' is read as an option of its own, as `--mcp-config=FILE` was.
        argv = [launch.argv[0], f"--resume={session}", *launch.argv[1:]]
        return dataclasses.replace(launch, argv=argv)

    def reader(self, role: RoleConfig) -> OutputReader:
        return ClaudeReader(role)

    def result(self, role: RoleConfig, reader: OutputReader, exit_status: ExitStatus, run: Run,
               now: float, handle: object = None) -> RunResult:
        assert isinstance(reader, ClaudeReader)
        if reader.stream.ignored_session_id is not None:
            log.warning("run %s: its output named %s as its session, which is not a session "
                        "id: ignored (a retry starts a fresh session)", run.id,
                        shown(reader.stream.ignored_session_id))
        claude = reader.stream.result
        if run.report is not None or claude is None:
            # No result event: the agent's own report, a limit seen mid-run, or the exit decide.
            return super().result(role, reader, exit_status, run, now)
        spend = _spend(claude, reader.stream.session_id)
        if not claude.is_error and (claude.declared_complete or not role.require_marker):
            return RunResult(Outcome.SUCCEEDED, exit_status.code,
                             summary=claude.summary[:SUMMARY_LIMIT], **spend)
        completed = claude.summary if claude.declared_complete else reader.stream.completed_summary
        if completed is not None:
            # TASK_COMPLETE, then a usage limit or an API error: the work is done (partial
            # success is success); the limit still pauses the runtime through the reader.
            return RunResult(Outcome.SUCCEEDED, exit_status.code,
                             summary=(completed or "done")[:SUMMARY_LIMIT], **spend)
        tail = reader.error_tail or None
        limit = claude.rate_limit or reader.rate_limit
        if limit is not None:
            until = known_reset(limit, now)  # None: the daemon picks the pause
            return RunResult(Outcome.RATE_LIMITED, exit_status.code, error=limit.excerpt or
                             limit.source, error_tail=tail, retry_at=until, **spend)
        if not claude.is_error:
            error = "finished without TASK_COMPLETE (the role sets require_marker)"
        else:
            status = f"API error {claude.api_error_status}: " if claude.api_error_status else ""
            error = f"{status}{claude.result_text[:SUMMARY_LIMIT] or claude.subtype}"
        return RunResult(Outcome.FAILED, exit_status.code, error=error, error_tail=tail, **spend)


def _write_mcp_config(files: RunFiles) -> Path:
    """The run's MCP config: `taskherd mcp` started by this installation's Python. Its
    credential is not written here: Claude Code fills `${VAR}` from the agent's environment,
    where the daemon put TASKHERD_RUN_TOKEN, so the file holds no secret."""
    path = files.prompt.with_name(files.prompt.stem + ".mcp.json")
    # alwaysLoad: connected before the first turn. Otherwise print mode starts the
    # conversation while the server is still connecting, and an early call finds no tool.
    server = {"type": "stdio", "command": sys.executable, "args": ["-m", "taskherd", "mcp"],
              "env": {name: f"${{{name}}}" for name in MCP_ENV}, "alwaysLoad": True}
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with open(fd, "w", encoding="utf-8") as out:
        json.dump({"mcpServers": {MCP_SERVER: server}}, out)
    return path


def _spend(claude: ClaudeRunResult, session_id: str | None) -> dict:
    return {
        "cost_usd": claude.total_cost_usd,
        "input_tokens": claude.input_tokens + claude.cache_creation_input_tokens
        + claude.cache_read_input_tokens,
        "output_tokens": claude.output_tokens,
        "turns": claude.num_turns,
        # The first one the stream named (the CLI's init, before the agent did anything).
        "session_id": session_id or claude.session_id,
    }


def _utc(now: float) -> datetime:
    return datetime.fromtimestamp(now, UTC)
