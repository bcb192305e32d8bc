"""What a runtime is: how a role's agent is started (`start` → an `Execution`), how its output
is read (`reader`), and how what was seen becomes an outcome (`result`).

The supervisor watches every execution the same way, an agent process or an in-process call.
Output reaches the runtime's `OutputReader` incrementally, as the supervisor tails the run's
log, so a rate-limit signal can pause the fleet while the run is still going.
"""

from __future__ import annotations

import abc
import logging
import os
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from taskherd.host import procs
from taskherd.host.procs import ExitStatus
from taskherd.host.sandbox import Confinement
from taskherd.model import Outcome, Run, RunResult, Task
from taskherd.model.settings import RoleConfig
from taskherd.policy.loops import RepeatedLines
from taskherd.policy.prompt import PromptContext, build_prompt
from taskherd.policy.timefmt import reading_zone
from taskherd.runtimes.ratelimit import RateLimitSignal, detect_rate_limit, known_reset
from taskherd.runtimes.sessions import shown, valid_session_id

log = logging.getLogger("taskherd.supervisor")
TASK_COMPLETE = re.compile(r"^\s*TASK_COMPLETE:\s*(?P<summary>.*?)\s*$")
TAIL_LINES = 40  # kept on the task for the dead-letter set


@dataclass(frozen=True)
class Launch:
    """How to start one run's agent: an argv list (never a shell string) and its inputs."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # role env plus runtime extras
    cwd: str | None = None
    stdin_path: Path | None = None


@dataclass(frozen=True)
class RunFiles:
    log: Path
    prompt: Path


@dataclass(frozen=True)
class AgentEnv:
    """What the daemon gives every agent process: its PATH and its TASKHERD_* variables."""

    path: str
    variables: dict[str, str]
    # The session of the task's previous attempt, for a role that continues it (`resume`).
    resume_session: str | None = None
    # What the prompt builder adds to the task's prompt: delivered messages, role memory.
    context: PromptContext = PromptContext()
    # Its role's sandbox and caps (see taskherd.host.sandbox); None: unconfined.
    confinement: Confinement | None = None


class Execution(Protocol):
    """A started run as the supervisor watches it: an agent process (procs.ProcessHandle) or an
    in-process call (the chat runtime's). Output goes to `log_path` either way."""

    # Read-only here: a process handle always has a pid, an in-process call none; as plain
    # attributes the protocol would demand that either may be set to the other's kind.
    @property
    def pid(self) -> int | None: ...  # None: nothing to adopt after a restart

    @property
    def started_at(self) -> float | None: ...  # its start time tells it from a reused pid

    @property
    def log_path(self) -> Path: ...

    def is_alive(self) -> bool: ...

    async def wait_exit(self) -> ExitStatus: ...

    async def terminate(self, grace: float) -> object: ...

    def close(self) -> None: ...


class OutputReader:
    """Reads a run's output as it is written; remembers what decides the outcome."""

    def __init__(self, role: RoleConfig):
        self.role = role
        self.summary: str | None = None  # from a TASK_COMPLETE line
        self.rate_limit: RateLimitSignal | None = None
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        # The repeated block once the agent is seen looping (the supervisor ends it).
        self.looping: str | None = None
        # The agent got past its provider: its first model event (runtimes that have them).
        # After a rate limit, the probe run's first one lets the rest of the runtime start.
        self.progressed = False
        self._lines = RepeatedLines(role.loop_repeats, role.loop_window)
        self._partial = b""

    def feed(self, chunk: bytes, now: float) -> RateLimitSignal | None:
        """Take newly written bytes; return a rate-limit signal the first time one is seen."""
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        fresh_limit = None
        for raw in lines:
            signal = self.line(raw.decode("utf-8", "replace"), now)
            if signal is not None and self.rate_limit is None:
                self.rate_limit = fresh_limit = signal
        return fresh_limit

    def gap(self) -> None:
        """Output was passed over (too much of it, or a line too long): the line begun so far
        is not whole, and is forgotten."""
        self._partial = b""

    def continues(self, earlier: list[Run]) -> None:
        """This run continues the session of `earlier` runs (`resume`): a runtime whose usage
        figures count the whole session takes their share out."""

    def finish(self, now: float) -> RateLimitSignal | None:
        """The process ended: read the last line even without its newline."""
        chunk, self._partial = self._partial, b""
        return self.feed(chunk + b"\n", now) if chunk else None

    def line(self, text: str, now: float) -> RateLimitSignal | None:
        if text.startswith("# taskherd "):
            return None  # the supervisor's own header line
        self.tail.append(text)
        if self.looping is None:
            self.looping = self._lines.feed(text, now)
        marker = TASK_COMPLETE.match(text)
        if marker:
            self.summary = marker.group("summary") or "done"
        return None

    def limit_met(self, exit_status: ExitStatus, now: float) -> RateLimitSignal | None:
        """The rate limit the run met, whatever its outcome (work done before a limit is still
        done, and the runtime still limited): one seen while it ran, else, when it exited
        non-zero, one its last lines name. A run that exits 0 while talking of rate limits
        (it may have written a limiter) met none."""
        if self.rate_limit is not None or not exit_status.code:
            return self.rate_limit
        return self.rate_limit_in_tail(now)

    def rate_limit_in_tail(self, now: float) -> RateLimitSignal | None:
        text = "\n".join(self.tail)
        return detect_rate_limit(text, _utc(now), self.role.rate_limit_patterns,
                                 reading_zone(self.role.timezone))

    @property
    def error_tail(self) -> str:
        return "\n".join(self.tail)


class Runtime(abc.ABC):
    name: str

    @abc.abstractmethod
    def start(self, role: RoleConfig, task: Task, run: Run, files: RunFiles,
              agent: AgentEnv) -> Execution:
        """Start the run; raise OSError or ValueError when it cannot start."""

    def reader(self, role: RoleConfig) -> OutputReader:
        return OutputReader(role)

    def result(
        self,
        role: RoleConfig,
        reader: OutputReader,
        exit_status: ExitStatus,
        run: Run,
        now: float,
        handle: object = None,
    ) -> RunResult:
        """Turn what was seen into an outcome. The agent's own report wins, then a
        TASK_COMPLETE line (partial success is success), then a rate limit, then the exit."""
        tail = reader.error_tail or None
        if run.report == "done":
            return RunResult(Outcome.SUCCEEDED, exit_status.code, summary=run.report_summary)
        if run.report == "block":
            return RunResult(Outcome.BLOCKED, exit_status.code, summary=run.report_summary)
        if run.report == "fail":
            error = run.report_summary or "the agent reported failure"
            return RunResult(Outcome.FAILED, exit_status.code, error=error, error_tail=tail)
        if reader.summary is not None:
            return RunResult(Outcome.SUCCEEDED, exit_status.code, summary=reader.summary)
        if exit_status.code == 0 and not role.require_marker:
            return RunResult(Outcome.SUCCEEDED, 0)
        limit = reader.limit_met(exit_status, now)
        if limit is not None:
            until = known_reset(limit, now)  # None: the daemon picks the pause
            return RunResult(
                Outcome.RATE_LIMITED,
                exit_status.code,
                error=limit.excerpt,
                error_tail=tail,
                retry_at=until,
            )
        return failure(role, exit_status, tail)


class CommandLineRuntime(Runtime):
    """A runtime whose agent is a program: it builds the launch, this starts it under the shim
    (own session, output straight to the run's log)."""

    @abc.abstractmethod
    def launch(self, role: RoleConfig, task: Task, run: Run, files: RunFiles,
               prompt: str) -> Launch: ...

    def resumed(self, launch: Launch, session: str) -> Launch:
        """The launch that continues `session` instead of starting afresh; a runtime that
        cannot continue one starts afresh."""
        return launch

    def start(self, role: RoleConfig, task: Task, run: Run, files: RunFiles,
              agent: AgentEnv) -> Execution:
        launch = self.launch(role, task, run, files, build_prompt(task, agent.context))
        session = valid_session_id(agent.resume_session)
        if session is not None:
            launch = self.resumed(launch, session)
        elif agent.resume_session:
            # Checked again where it goes into argv: an id recorded before ids were checked
            # where they are read, or by another node's older daemon.
            log.warning("run %s: the session to resume, %s, is not a session id: it starts a "
                        "fresh one", run.id, shown(agent.resume_session))
        env = procs.agent_env(agent.path, launch.env, agent.variables)
        confined = agent.confinement or Confinement()
        if confined.wrap is not None:
            procs.check_argv(launch.argv, env, launch.cwd)  # named now, not as the box's exit 1
        header = {"run": run.id, "task": task.id, "role": role.name}
        # on_input = wait: the agent's stdin stays open for `taskherd task answer`.
        spawned = procs.spawn(confined.argv(launch.argv, env), env=env, cwd=launch.cwd,
                              log_path=files.log, stdin_path=launch.stdin_path, header=header,
                              keep_input_open=role.on_input == "wait",
                              max_log_bytes=role.max_log_bytes, cgroups=confined.cgroups,
                              open_files=confined.open_files,
                              copier_cgroups=confined.copier_cgroups,
                              box=confined.spare_plan(launch.argv, env))
        return spawned.handle


def write_prompt(path: Path, prompt: str) -> None:
    """The run's prompt into its file, which the daemon made empty and private before: written
    in place, not truncated first. ext4 flushes a file truncated to nothing as it is closed
    (auto_da_alloc, its guard for programs that rewrite a file without fsync): ~1 ms on the way
    from a claim to its agent's exec. A longer file (an earlier database's run of that id) is
    cut after the write."""
    data = prompt.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if os.fstat(fd).st_size > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def failure(role: RoleConfig, exit_status: ExitStatus, tail: str | None) -> RunResult:
    """The outcome of a run that ended without success, from its exit status alone."""
    if exit_status.code == 0:
        error = "exited 0 without TASK_COMPLETE (the role sets require_marker)"
        return RunResult(Outcome.FAILED, 0, error=error, error_tail=tail)
    if exit_status.code is not None:
        return RunResult(
            Outcome.FAILED,
            exit_status.code,
            error=f"exited with code {exit_status.code}",
            error_tail=tail,
        )
    if exit_status.signal is not None:
        error = f"killed by signal {exit_status.signal}"
        return RunResult(Outcome.CRASHED, error=error, error_tail=tail)
    return RunResult(
        Outcome.CRASHED, error="the process vanished without an exit status", error_tail=tail
    )


def _utc(now: float) -> datetime:
    return datetime.fromtimestamp(now, UTC)
