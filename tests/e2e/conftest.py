"""Shared fixtures for tests that run real agent CLIs against fake APIs.

`claude_cli` is the Claude Code binary that `.ci/install-claude` puts in
`<repo>/.claude-cli/`, `codex_cli` the Codex CLI that `.ci/install-codex` puts in
`<repo>/.codex-cli/`. Without them those tests skip on a developer's machine but
fail in CI (CI=true), where a missing install is a broken build.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from taskherd.runtimes.claude_stream import ClaudeEvent, ClaudeStreamReader
from tests.e2e.fake_anthropic import FakeAnthropic, Step
from tests.e2e.fake_openai import FakeOpenAI
from tests.e2e.fake_responses import FakeResponses

REPO = Path(__file__).resolve().parents[2]
CLAUDE_CLI = REPO / ".claude-cli" / "node_modules" / ".bin" / "claude"
CODEX_CLI = REPO / ".codex-cli" / "node_modules" / ".bin" / "codex"

# How often a waiting test looks at the log again; a wait is bounded by its
# own timeout, this only sets how soon a change is noticed.
_POLL_SECONDS = 0.05


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    if CLAUDE_CLI.exists() and os.access(CLAUDE_CLI, os.X_OK):
        return CLAUDE_CLI
    message = f"Claude Code CLI not installed at {CLAUDE_CLI}; run .ci/install-claude"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def codex_cli() -> Path:
    if CODEX_CLI.exists() and os.access(CODEX_CLI, os.X_OK):
        return CODEX_CLI
    message = f"Codex CLI not installed at {CODEX_CLI}; run .ci/install-codex"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def start_fake_anthropic() -> Iterator[Callable[..., FakeAnthropic]]:
    started: list[FakeAnthropic] = []

    def start(script: list[Step], after_script: Step | None = None) -> FakeAnthropic:
        fake = FakeAnthropic(script, after_script)
        started.append(fake.start())
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def start_fake_openai() -> Iterator[Callable[..., FakeOpenAI]]:
    started: list[FakeOpenAI] = []

    def start(script, after_script=None, **kwargs) -> FakeOpenAI:
        fake = FakeOpenAI(script, after_script, **kwargs)
        started.append(fake.start())
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def start_fake_responses() -> Iterator[Callable[..., FakeResponses]]:
    started: list[FakeResponses] = []

    def start(script, after_script=None) -> FakeResponses:
        fake = FakeResponses(script, after_script)
        started.append(fake.start())
        return fake

    yield start
    for fake in started:
        fake.stop()


class ClaudeRun:
    """The real CLI as a subprocess, run the way the supervisor runs agents:
    own session, stdout+stderr into a log file, read back with the reader."""

    def __init__(self, cli: Path, args: list[str], env: dict[str, str], cwd: Path, log: Path):
        self.log_path = log
        self.reader = ClaudeStreamReader()
        self.events: list[ClaudeEvent] = []
        self.started_at = time.monotonic()
        with open(log, "wb") as log_file:
            log_file.write(b"# taskherd e2e: claude run log\n")
            log_file.flush()
            self.process = subprocess.Popen(
                [str(cli), *args],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._log = open(log, "rb")  # noqa: SIM115 - kept open to tail it, closed in kill()

    def read_new(self) -> list[ClaudeEvent]:
        new = self.reader.read_available(self._log)
        self.events += new
        return new

    def wait_for(self, predicate: Callable[[ClaudeEvent], bool], timeout: float) -> ClaudeEvent:
        """The first event (seen so far or later) that satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            self.read_new()
            for event in self.events[seen:]:
                if predicate(event):
                    return event
            seen = len(self.events)
            if self.process.poll() is not None:
                self.read_new()
                self.events += self.reader.finish()
                match = next((e for e in self.events[seen:] if predicate(e)), None)
                if match is not None:
                    return match
                raise AssertionError(
                    f"claude exited ({self.process.returncode}) without the "
                    f"event; log:\n{self.log_text()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no such event within {timeout}s; log:\n{self.log_text()}")
            time.sleep(_POLL_SECONDS)

    def wait_exit(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"claude still running after {timeout}s; log:\n{self.log_text()}"
            ) from None
        self.read_new()
        self.events += self.reader.finish()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture
def run_claude(claude_cli, tmp_path) -> Iterator[Callable[..., ClaudeRun]]:
    """run_claude(api, prompt, *extra_args, env=None) starts `claude -p` in
    stream-json mode against `api`, with its HOME and cwd in tmp_path."""
    runs: list[ClaudeRun] = []

    def run(
        api: FakeAnthropic, prompt: str, *extra_args: str, env: dict[str, str] | None = None
    ) -> ClaudeRun:
        home = tmp_path / f"home{len(runs)}"
        workdir = tmp_path / f"work{len(runs)}"
        home.mkdir()
        workdir.mkdir()
        # Nothing inherited but PATH: no real API key, no CLAUDECODE (which
        # makes a nested CLI refuse to start), no user settings.
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            **api.client_env(home=str(home)),
            **(env or {}),
        }
        args = ["-p", prompt, "--output-format", "stream-json", "--verbose", *extra_args]
        claude_run = ClaudeRun(
            claude_cli, args, full_env, workdir, tmp_path / f"run{len(runs)}.log"
        )
        runs.append(claude_run)
        return claude_run

    yield run
    for claude_run in runs:
        claude_run.kill()
