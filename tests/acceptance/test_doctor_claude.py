"""`taskherd doctor` on a `claude` role: can the service's Claude Code sign in? And does the
unit carry the environment file where its key belongs?"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = """\
[daemon]
data_dir = "data"
timezone = "UTC"

[roles.coder]
runtime = "claude"
binary = "/bin/true"
"""


def doctor(folder: Path, **env: str) -> dict[str, dict]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN")}
    result = subprocess.run(
        [sys.executable, "-m", "taskherd", "--config", str(folder / "taskherd.toml"), "doctor",
         "--json"],
        env=base | {"HOME": str(folder / "home"), "TASKHERD_HOME": str(folder / "th")} | env,
        capture_output=True, text=True, timeout=60, check=False)
    checks = json.loads(result.stdout)
    checks = checks["checks"] if isinstance(checks, dict) else checks
    return {check["what"]: check for check in checks}


def sign_in(checks: dict[str, dict]) -> dict:
    return next(check for what, check in checks.items() if "Claude Code sign-in" in what)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "taskherd.toml").write_text(CONFIG)
    (tmp_path / "home").mkdir()
    return tmp_path


def test_no_key_and_no_login_is_a_problem_naming_both_fixes(folder):
    check = sign_in(doctor(folder))
    assert check["status"] == "problem"
    assert "log in" in check["fix"] and str(folder / "taskherd.env") in check["fix"]


def test_a_key_only_in_the_shell_is_a_warning_the_service_will_not_see_it(folder):
    check = sign_in(doctor(folder, ANTHROPIC_API_KEY="sk-shell-only"))
    assert check["status"] == "warn"
    assert "ANTHROPIC_API_KEY" in check["why"] and "sk-shell-only" not in json.dumps(check)


def test_a_key_in_the_environment_file_or_a_login_is_ok(folder):
    (folder / "taskherd.env").write_text("ANTHROPIC_API_KEY=sk-from-file\n")
    check = sign_in(doctor(folder))
    assert check["status"] == "ok" and "taskherd.env" in check["what"]
    assert "sk-from-file" not in json.dumps(check)
    (folder / "taskherd.env").unlink()
    (folder / "home" / ".claude").mkdir()
    (folder / "home" / ".claude" / ".credentials.json").write_text("{}")
    assert sign_in(doctor(folder))["status"] == "ok"
