"""`taskherd doctor` as a subprocess: it judges commands by the PATH the service will run with.

Exit codes: 0 with no problem (warnings allowed), 1 with any problem, a config that does not
load included (it is a finding, printed as a problem line like the others).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest


def doctor(config: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TASKHERD_HOME": str(config.parent / "home")}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "taskherd", "--config", str(config), "doctor", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.fixture
def tool(tmp_path: Path) -> Path:
    """An agent program in a folder the test's shell PATH has and the service PATH does not."""
    folder = tmp_path / "shell-only-bin"
    folder.mkdir()
    program = folder / "my-agent"
    program.write_text("#!/bin/sh\necho TASK_COMPLETE: ok\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def write_config(tmp_path: Path, service_path: str, command: str) -> Path:
    config = tmp_path / "taskherd.toml"
    config.write_text(f"""\
[daemon]
data_dir = "data"
timezone = "UTC"
path = "{service_path}"

[roles.coder]
command = ["{command}", "--task", "{{task_id}}"]
""")
    return config


def test_command_on_the_shell_path_but_not_the_service_path_is_a_problem(
    tmp_path: Path, tool: Path
) -> None:
    config = write_config(tmp_path, "/usr/bin:/bin", tool.name)
    result = doctor(config, path=f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    assert result.returncode == 1, result.stdout
    line = next(line for line in result.stdout.splitlines() if "role coder" in line)
    assert line.startswith("problem ")
    assert "'my-agent'" in line and "/usr/bin:/bin" in line  # names the command and the PATH
    assert f"add {tool.parent} to daemon.path" in line  # and how to fix it


def test_a_good_config_passes(tmp_path: Path, tool: Path) -> None:
    config = write_config(tmp_path, f"{tool.parent}:/usr/bin:/bin", tool.name)
    result = doctor(config)
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    for what in ("config", "database", "log dir", "role coder", "timezone UTC", "disk"):
        assert any(line.startswith("ok") and what in line for line in lines), (what, lines)


def test_doctor_does_not_change_the_queue(tmp_path: Path, tool: Path) -> None:
    config = write_config(tmp_path, f"{tool.parent}:/usr/bin:/bin", tool.name)
    env = {**os.environ, "TASKHERD_HOME": str(tmp_path / "home")}
    add = [
        sys.executable,
        "-m",
        "taskherd",
        "--config",
        str(config),
        "task",
        "add",
        "t",
        "--role",
        "coder",
        "--json",
    ]
    subprocess.run(add, check=True, capture_output=True, env=env, timeout=60)
    listing = [sys.executable, "-m", "taskherd", "--config", str(config), "task", "list", "--json"]
    before = subprocess.run(listing, check=True, capture_output=True, env=env, timeout=60)
    assert doctor(config).returncode == 0
    after = subprocess.run(listing, check=True, capture_output=True, env=env, timeout=60)
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert not list((tmp_path / "data" / "logs").glob(".doctor-*"))


def test_a_broken_config_is_a_problem_line_and_exit_1(tmp_path: Path) -> None:
    config = tmp_path / "taskherd.toml"
    config.write_text("[daemon]\nmax_concurent = 4\n")
    result = doctor(config)
    assert result.returncode == 1
    assert result.stdout.startswith("problem config")
    assert "max_concurent" in result.stdout


def test_json_and_a_missing_timezone_warns(tmp_path: Path, tool: Path) -> None:
    config = write_config(tmp_path, f"{tool.parent}:/usr/bin:/bin", tool.name)
    config.write_text(config.read_text().replace('timezone = "UTC"\n', ""))
    result = doctor(config, "--json")
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["ok"] is True
    zone = next(check for check in report["checks"] if check["what"] == "timezone")
    assert zone["status"] == "warn" and "daemon.timezone" in zone["fix"]
