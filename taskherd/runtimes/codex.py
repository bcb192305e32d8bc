"""The `codex` runtime: the Codex CLI run non-interactively (`codex exec --json`), read
through its JSON Lines output (runtimes/codex_stream.py).

Every event is activity; the last agent message is the summary (its `TASK_COMPLETE:` line
wins); tokens come from `turn.completed` and the cost from the config's `[prices]` for the
role's model (Codex prints no cost); `thread.started` gives the session id; an `error` whose
text is a usage or rate limit makes the run `rate_limited` with the reset time it names, and
pauses the runtime while the run is still going.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from taskherd.host.procs import ExitStatus
from taskherd.model import Outcome, Run, RunResult, Task
from taskherd.model.settings import RoleConfig
from taskherd.policy.timefmt import reading_zone
from taskherd.runtimes.base import (
    CommandLineRuntime,
    Launch,
    OutputReader,
    RunFiles,
    failure,
    write_prompt,
)
from taskherd.runtimes.codex_stream import CodexStreamReader, CodexStreamState
from taskherd.runtimes.ratelimit import RateLimitSignal, known_reset
from taskherd.runtimes.sessions import shown

log = logging.getLogger("taskherd.supervisor")

SUMMARY_LIMIT = 2000
# What Codex signs in with, besides a login stored in ~/.codex (HOME is carried over).
CODEX_AUTH_ENV = ("OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_HOME")


class CodexReader(OutputReader):
    def __init__(self, role: RoleConfig):
        super().__init__(role)
        self.stream = CodexStreamReader(role.rate_limit_patterns, reading_zone(role.timezone))
        self.earlier: list[Run] = []

    def continues(self, earlier: list[Run]) -> None:
        # `codex exec resume` reports the thread's tokens so far, the earlier runs' included.
        self.earlier = list(earlier)

    @property
    def state(self) -> CodexStreamState:
        return self.stream.state

    def feed(self, chunk: bytes, now: float) -> RateLimitSignal | None:
        seen_before = self.state.rate_limit
        self.stream.feed(chunk, _utc(now))
        return self._fresh_limit(seen_before)

    def gap(self) -> None:
        self.stream.gap()

    def finish(self, now: float) -> RateLimitSignal | None:
        seen_before = self.state.rate_limit
        self.stream.finish(_utc(now))
        return self._fresh_limit(seen_before)

    def _fresh_limit(self, seen_before: RateLimitSignal | None) -> RateLimitSignal | None:
        state = self.state
        if state.completed_summary is not None:
            # Done is done, whatever follows; a limit met after it still pauses the runtime.
            self.summary = state.completed_summary or "done"
        if state.rate_limit is not None and seen_before is None:
            self.rate_limit = state.rate_limit
            return self.rate_limit
        return None

    @property
    def error_tail(self) -> str:
        lines = [self.state.last_message or "", *self.state.errors[-3:]]
        return "\n".join(line[-SUMMARY_LIMIT:] for line in lines if line)


def own_sandbox(role: RoleConfig) -> str:
    """Codex's own sandbox mode for `role`. Codex confines its commands with bubblewrap too;
    inside taskherd's box it nests when the daemon runs as a normal user, but as root its
    bwrap cannot map its user namespace there ("setting up uid map: Operation not
    permitted": every command would fail). Then taskherd's box, which holds Codex and all it
    runs, is the boundary, and Codex's own is relaxed inside it."""
    confined = role.isolation is not None and role.isolation.confined
    return "danger-full-access" if confined and os.geteuid() == 0 else role.sandbox


class CodexRuntime(CommandLineRuntime):
    name = "codex"

    def launch(self, role: RoleConfig, task: Task, run: Run, files: RunFiles,
               prompt: str) -> Launch:
        write_prompt(files.prompt, prompt)
        argv = [role.binary or "codex", "exec", "--json", "--skip-git-repo-check",
                "--sandbox", own_sandbox(role), "-c",
                f"approval_policy={_toml_string(role.approval)}"]
        if role.model:
            argv += ["--model", role.model]
        if role.workdir:
            argv += ["--cd", role.workdir]
        argv += list(role.args)
        # `-` last: the prompt is read from stdin, so task text starting with '-' is never
        # one of Codex's options, and a long prompt never meets the kernel's argument limit.
        argv.append("-")
        signed_in = {key: os.environ[key] for key in CODEX_AUTH_ENV if os.environ.get(key)}
        return Launch(argv, signed_in | dict(role.env), role.workdir, files.prompt)

    def resumed(self, launch: Launch, session: str) -> Launch:
        # `codex exec resume -- ID -` continues the previous attempt's thread. Its options
        # come before the subcommand's own arguments; `resume` takes no --sandbox/--cd, which
        # are carried by the config it resumes. After `--` the id is never read as an option
        # (`--dangerously-bypass-approvals-and-sandbox` is one).
        argv = list(launch.argv)
        dash = argv.pop()
        return dataclasses.replace(launch, argv=[*argv, "resume", "--", session, dash])

    def reader(self, role: RoleConfig) -> OutputReader:
        return CodexReader(role)

    def result(self, role: RoleConfig, reader: OutputReader, exit_status: ExitStatus, run: Run,
               now: float, handle: object = None) -> RunResult:
        assert isinstance(reader, CodexReader)
        state = reader.state
        if state.ignored_thread_id is not None:
            log.warning("run %s: its output named %s as its thread, which is not a session id: "
                        "ignored (a retry starts a fresh session)", run.id,
                        shown(state.ignored_thread_id))
        spend = spend_of(role, state, reader.earlier)
        if run.report is not None:
            return dataclasses.replace(super().result(role, reader, exit_status, run, now),
                                       **spend)
        tail = reader.error_tail or None
        if state.completed_summary is not None:
            # TASK_COMPLETE, then perhaps a limit or an error: the work is done.
            return RunResult(Outcome.SUCCEEDED, exit_status.code,
                             summary=(state.completed_summary or "done")[:SUMMARY_LIMIT],
                             **spend)
        if exit_status.code == 0 and state.turn_completed and not state.turn_failed:
            if role.require_marker:
                return RunResult(Outcome.FAILED, 0, error="finished without TASK_COMPLETE "
                                 "(the role sets require_marker)", error_tail=tail, **spend)
            return RunResult(Outcome.SUCCEEDED, 0,
                             summary=(state.last_message or "done").strip()[:SUMMARY_LIMIT],
                             **spend)
        limit = reader.limit_met(exit_status, now)
        if limit is not None:
            return RunResult(Outcome.RATE_LIMITED, exit_status.code,
                             error=limit.excerpt or limit.source, error_tail=tail,
                             retry_at=known_reset(limit, now), **spend)
        if state.error is not None:
            return RunResult(Outcome.FAILED, exit_status.code, error=state.error[:SUMMARY_LIMIT],
                             error_tail=tail, **spend)
        return dataclasses.replace(failure(role, exit_status, tail), **spend)


def spend_of(role: RoleConfig, state: CodexStreamState,
             earlier: Sequence[Run] = ()) -> dict[str, Any]:
    """Tokens, turns, session id, and the cost at the role's model's price (None without
    one: an unknown cost is never written as zero)."""
    usage = state.usage
    cost = None
    if role.price is not None and usage.turns:
        cost = role.price.cost(usage.input_tokens, usage.output_tokens,
                               usage.cached_input_tokens)
    input_tokens, output_tokens = usage.input_tokens, usage.output_tokens
    if earlier and usage.turns:
        # A resumed thread's figures include the runs it continues: only the rest is this one's.
        input_tokens = max(0, input_tokens - sum(run.input_tokens or 0 for run in earlier))
        output_tokens = max(0, output_tokens - sum(run.output_tokens or 0 for run in earlier))
        if cost is not None:
            cost = max(0.0, cost - sum(run.cost_usd or 0.0 for run in earlier))
    return {
        "cost_usd": cost,
        "input_tokens": input_tokens if usage.turns else None,
        "output_tokens": output_tokens if usage.turns else None,
        "turns": usage.turns or None,
        "session_id": state.thread_id,
    }


def _toml_string(value: str) -> str:
    # `-c key=value` parses value as TOML: a quoted string can never become a table.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _utc(now: float) -> datetime:
    return datetime.fromtimestamp(now, UTC)
