"""Claude Code agents get the daemon's sign-in variables (from the service's environment
file), and nothing else of the daemon's environment; a role's own env wins."""

from __future__ import annotations

from taskherd.config import parse_config
from taskherd.host.service import render_systemd, service_spec
from taskherd.model import Priority, Run, Task, TaskState
from taskherd.model.settings import RoleConfig
from taskherd.runtimes.base import RunFiles
from taskherd.runtimes.claude import ClaudeRuntime


def record(cls, **values):
    fields = dict.fromkeys(cls.__dataclass_fields__)
    fields.update(values)
    return cls(**fields)


def launch_env(tmp_path, monkeypatch, role_env=None):
    task = record(Task, id=1, role="coder", title="t", prompt="do it", priority=Priority.P2,
                  state=TaskState.RUNNING, review=False, attempts=0, max_attempts=3, rescues=0,
                  rate_limits=0, run_after=0.0, meta={}, created_at=0.0, updated_at=0.0)
    run = record(Run, id=1, task_id=1, attempt=1, node="n", role="coder", claimed_at=0.0)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-daemon")
    monkeypatch.setenv("SOME_DAEMON_SECRET", "nope")
    role = RoleConfig(name="coder", runtime="claude", env=role_env or {})
    files = RunFiles(tmp_path / "run.log", tmp_path / "run.prompt")
    return ClaudeRuntime().launch(role, task, run, files, task.prompt).env


def test_the_daemons_claude_key_reaches_the_agent_and_nothing_else(tmp_path, monkeypatch):
    env = launch_env(tmp_path, monkeypatch)
    assert env["ANTHROPIC_API_KEY"] == "sk-daemon"
    assert "SOME_DAEMON_SECRET" not in env


def test_a_roles_own_key_wins(tmp_path, monkeypatch):
    env = launch_env(tmp_path, monkeypatch, {"ANTHROPIC_API_KEY": "sk-role"})
    assert env["ANTHROPIC_API_KEY"] == "sk-role"


def test_the_systemd_unit_reads_the_environment_file_beside_the_config(tmp_path):
    config = parse_config({"daemon": {"timezone": "UTC"}}, base_dir=tmp_path,
                          source=tmp_path / "taskherd.toml")
    unit = render_systemd(service_spec(config, ["/usr/bin/taskherd"]))
    assert f"EnvironmentFile=-{tmp_path / 'taskherd.env'}" in unit.splitlines()
