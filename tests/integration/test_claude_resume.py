"""`resume = true` on a claude role: a retry continues the previous attempt's Claude Code
session (`claude --resume ID`) instead of starting afresh; other roles start afresh."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from taskherd.config import ConfigError, parse_config
from taskherd.model import NewTask, Outcome, RunResult
from taskherd.queue import RetryPolicy
from taskherd.runtimes.base import Launch
from taskherd.runtimes.claude import ClaudeRuntime
from taskherd.services.supervisor import Supervisor
from taskherd.store import open_store


def test_a_resumed_launch_names_the_session_before_everything_else():
    launch = Launch(["claude", "-p", "--output-format", "stream-json", "--verbose"])
    resumed = ClaudeRuntime().resumed(launch, "s-41")
    assert resumed.argv == ["claude", "--resume", "s-41", "-p", "--output-format",
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
        for attempt, session in enumerate(("s-1", "s-2"), start=1):
            claim = store.claim("n1", 1000.0 + attempt * 100, 60.0)
            store.mark_spawned(claim.run.id, claim.run.claimed_at, 60.0, pid=1,
                               pid_started_at=1.0, log_path=None)
            failed = RunResult(Outcome.FAILED, exit_code=1, error="boom", session_id=session)
            store.finish_run(claim.run.id, failed, RetryPolicy(backoff_base=0), claim.run.claimed_at)
        supervisor = Supervisor(config, store, time.time)
        current = store.get_task(task.id)
        [latest] = supervisor.launch.session_runs(config.role("coder"), current)
        assert latest.session_id == "s-2"
        assert supervisor.launch.session_runs(config.role("fresh"), current) == []
    finally:
        store.close()
