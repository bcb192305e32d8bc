"""`taskherd token create|list|revoke` as a person runs them: the token is printed once and
kept only as a hash; bad input exits 2 and changes nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = '[daemon]\ndatabase = "taskherd.db"\n\n[roles.coder]\ncommand = ["true"]\n'


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "taskherd.toml").write_text(CONFIG)
    return tmp_path


def taskherd(workspace: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TASKHERD_HOME": str(workspace / "home")}
    env.pop("TASKHERD_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "taskherd", *args], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=60)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_token_is_shown_once_and_stored_hashed(workspace):
    made = taskherd(workspace, "token", "create", "--name", "grafana", "--scope", "read",
                    "--expires", "30d")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("thk_") and len(token) > 40
    assert "not shown again" in made.stderr
    database = (workspace / "taskherd.db").read_bytes()
    assert token.encode() not in database
    assert hashlib.sha256(token.encode()).hexdigest().encode() in database
    listed = json.loads(taskherd(workspace, "token", "list", "--json").stdout)
    assert [(t["name"], t["scope"], t["status"]) for t in listed] == [("grafana", "read", "live")]
    assert "token" not in listed[0]
    assert token not in taskherd(workspace, "token", "list").stdout
    revoked = taskherd(workspace, "token", "revoke", "grafana")
    assert revoked.returncode == 0, revoked.stderr
    listed = json.loads(taskherd(workspace, "token", "list", "--json").stdout)
    assert listed[0]["status"] == "revoked"


@pytest.mark.parametrize("args, says", [
    (["--name", "x", "--scope", "root"], "root"),
    (["--name", "bad name", "--scope", "read"], "bad name"),
    (["--name", "x", "--scope", "read", "--expires", "soon"], "soon"),
    (["--name", "x", "--scope", "read", "--role", "coder"], "intake tokens only"),
    (["--name", "x", "--scope", "intake", "--role", "painter"], "painter"),
    (["--name", "x", "--scope", "intake", "--rate", "0"], "rate"),
])
def test_bad_input_exits_2_and_changes_nothing(workspace, args, says):
    assert taskherd(workspace, "token", "create", "--name", "first", "--scope", "read"
                    ).returncode == 0
    before = digest(workspace / "taskherd.db")
    result = taskherd(workspace, "token", "create", *args)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert digest(workspace / "taskherd.db") == before


def test_the_last_admin_token_is_revoked_only_when_said_so(workspace):
    assert taskherd(workspace, "token", "create", "--name", "root", "--scope",
                    "admin").returncode == 0
    kept = taskherd(workspace, "token", "revoke", "root")
    assert kept.returncode == 1 and "last live admin token" in kept.stderr
    assert "Traceback" not in kept.stderr
    gone = taskherd(workspace, "token", "revoke", "root", "--even-last-admin")
    assert gone.returncode == 0, gone.stderr
    listed = json.loads(taskherd(workspace, "token", "list", "--json").stdout)
    assert listed[0]["status"] == "revoked"
