"""`resume = true` on a claude role: a retry continues the previous attempt's Claude Code
session (`claude --resume ID`) instead of starting afresh; other roles start afresh."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from pathlib import Path

import pytest

from taskherd.config import parse_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.model.settings import ConfigError, RetryPolicy
from taskherd.policy.admission import ClaimRequest
from taskherd.runtimes.base import AgentEnv, Launch, RunFiles
from taskherd.runtimes.claude import ClaudeRuntime
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store

FIRST = "748f6d6d-1011-44bc-8f20-b2a056f07221"  # session ids as Claude Code writes them
SECOND = "776eefa3-b54d-418f-9ee7-375700695dac"


def test_a_resumed_launch_names_the_session_before_everything_else():
    launch = Launch(["claude", "-p", "--output-format", "stream-json", "--verbose"])
    resumed = ClaudeRuntime().resumed(launch, FIRST)
    # One item: after a bare `--resume` (its value is optional) an id is read as an option.
    assert resumed.argv == ["claude", f"--resume={FIRST}", "-p", "--output-format",
                            "stream-json", "--verbose"]


def test_only_a_claude_role_may_resume(tmp_path):
    config = parse_config({"roles": {"coder": {"runtime": "claude", "resume": True}}},
                          base_dir=tmp_path)
    assert config.role("coder").resume
    with pytest.raises(ConfigError, match="resume"):
        parse_config({"roles": {"script": {"command": ["x"], "resume": True}}}, base_dir=tmp_path)


def test_the_retry_gets_the_latest_session_of_its_task(tmp_path: Path, database):
    config = parse_config({"daemon": {"database": database, "data_dir": "data"},
                           "roles": {"coder": {"runtime": "claude", "resume": True},
                                     "fresh": {"runtime": "claude"}}}, base_dir=tmp_path)
    store = open_store(database, durability="normal")
    try:
        task = store.enqueue(NewTask(role="coder", title="t"), 1000.0).task
        for attempt, session in enumerate((FIRST, SECOND), start=1):
            claim = store.claim(ClaimRequest("n1", 1000.0 + attempt * 100, 60.0))
            store.mark_spawned(claim.run.id, claim.run.claimed_at, 60.0, pid=1,
                               pid_started_at=1.0, log_path=None)
            failed = RunResult(Outcome.FAILED, exit_code=1, error="boom", session_id=session)
            store.finish_run(claim.run.id, failed, RetryPolicy(backoff_base=0),
                             claim.run.claimed_at)
        supervisor = Supervisor(config, store, time.time)
        current = store.get_task(task.id)
        [latest] = supervisor.launch.session_runs(config.role("coder"), current)
        assert latest.session_id == SECOND
        assert supervisor.launch.session_runs(config.role("fresh"), current) == []
    finally:
        store.close()


HOSTILE = "--mcp-config=/tmp/x.json"


def test_a_recorded_session_that_is_no_id_is_never_resumed(tmp_path: Path, database, caplog):
    """A session id a daemon recorded before ids were checked where they are read: the retry
    starts a fresh session, and were it given to the runtime all the same, it never reaches
    the agent's argv."""
    config = parse_config({"daemon": {"database": database, "data_dir": "data"},
                           "roles": {"coder": {"runtime": "claude", "resume": True}}},
                          base_dir=tmp_path)
    store = open_store(database, durability="normal")
    try:
        task = store.enqueue(NewTask(role="coder", title="t"), 1000.0).task
        claim = store.claim(ClaimRequest("n1", 1000.0, 60.0))
        store.mark_spawned(claim.run.id, 1000.0, 60.0, pid=1, pid_started_at=1.0, log_path=None)
        failed = RunResult(Outcome.FAILED, exit_code=1, error="boom", session_id=HOSTILE)
        store.finish_run(claim.run.id, failed, RetryPolicy(backoff_base=0), 1001.0)
        supervisor = Supervisor(config, store, time.time)
        with caplog.at_level(logging.WARNING, logger="taskherd.supervisor"):
            assert supervisor.launch.session_runs(config.role("coder"), task) == []
        assert f"{HOSTILE!r}, is not a session id" in caplog.text
    finally:
        store.close()
    args = tmp_path / "args"
    binary = tmp_path / "claude"
    binary.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {args}\n")
    binary.chmod(0o755)
    role = dataclasses.replace(config.role("coder"), binary=str(binary))
    files = RunFiles(tmp_path / "run.log", tmp_path / "run.prompt")
    agent = AgentEnv(os.environ["PATH"], {}, resume_session=HOSTILE)
    with caplog.at_level(logging.WARNING, logger="taskherd.supervisor"):
        handle = ClaudeRuntime().start(role, task, claim.run, files, agent)
    assert asyncio.run(handle.wait_exit()).code == 0
    assert "it starts a fresh one" in caplog.text
    argv = args.read_text().splitlines()
    assert argv[0] == "-p" and not any("--resume" in item or "mcp" in item for item in argv)
