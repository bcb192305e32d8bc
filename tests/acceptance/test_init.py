"""`taskherd init`: a starter file a new user can run as it is, and read to learn every knob."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from dataclasses import fields

from taskherd.config import load_config
from taskherd.model.settings import DaemonConfig


def init(tmp_path, path: str) -> str:
    env = {**os.environ, "PATH": path, "TASKHERD_HOME": str(tmp_path / "home")}
    result = subprocess.run([sys.executable, "-m", "taskherd", "init", str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return (tmp_path / "taskherd.toml").read_text()


def test_the_starter_role_runs_claude_code_through_its_own_runtime(tmp_path):
    text = init(tmp_path, os.environ["PATH"])
    coder = tomllib.loads(text)["roles"]["coder"]
    assert coder["runtime"] == "claude"
    assert "command" not in coder  # the claude runtime builds its own argv
    assert load_config(tmp_path / "taskherd.toml").role("coder").runtime == "claude"


def test_the_starter_path_names_each_folder_once(tmp_path):
    text = init(tmp_path, "/usr/bin:/bin:/usr/bin:/opt/x/bin:/bin")
    assert tomllib.loads(text)["daemon"]["path"] == "/usr/bin:/bin:/opt/x/bin"


def test_every_daemon_setting_is_in_the_starter_with_a_comment(tmp_path):
    text = init(tmp_path, os.environ["PATH"])
    lines = text.splitlines()
    for name in (field.name for field in fields(DaemonConfig)):
        at = next((i for i, line in enumerate(lines)
                   if line.lstrip("# ").startswith(f"{name} =")), None)
        assert at is not None, f"daemon.{name} is not in the starter file"
        assert lines[at - 1].startswith("#") or "#" in lines[at].split("=", 1)[1], \
            f"daemon.{name} has no comment saying what it does"


def test_the_starter_role_runs_in_a_sandbox_on_linux(tmp_path):
    text = init(tmp_path, os.environ["PATH"])
    isolation = load_config(tmp_path / "taskherd.toml").role("coder").isolation
    assert isolation is not None
    assert isolation.mode == ("bwrap" if sys.platform.startswith("linux") else "off")
    assert isolation.network == "host"  # it must reach its model
    assert "[roles.coder.isolation]" in text
