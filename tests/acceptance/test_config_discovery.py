"""Which queue am I talking to? Run from a subfolder, the CLI finds the fleet's taskherd.toml
by walking up; with none anywhere above, it says which database it uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def taskherd(cwd, *args):
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHERD_")}
    env["HOME"] = str(cwd)  # the platform data dir lands in the test's folder
    env["XDG_DATA_HOME"] = str(cwd / "xdg")
    return subprocess.run([sys.executable, "-m", "taskherd", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_subfolder_finds_the_fleets_config_above_it(tmp_path):
    (tmp_path / "taskherd.toml").write_text(
        '[daemon]\ndatabase = "fleet.db"\n\n[roles.coder]\ncommand = ["true"]\n')
    deep = tmp_path / "src" / "app"
    deep.mkdir(parents=True)
    added = taskherd(deep, "task", "add", "from below", "-r", "coder", "--json")
    assert added.returncode == 0, added.stderr
    assert "no taskherd.toml" not in added.stderr
    listed = taskherd(tmp_path, "task", "list", "--json")
    assert [task["title"] for task in json.loads(listed.stdout)] == ["from below"]
    assert (tmp_path / "fleet.db").exists()
    assert not (deep / "fleet.db").exists()


def test_without_any_config_the_cli_names_the_database_it_uses(tmp_path):
    lonely = tmp_path / "nowhere"
    lonely.mkdir()
    result = taskherd(lonely, "status", "--json")
    assert result.returncode == 0, result.stderr
    assert "no taskherd.toml" in result.stderr
    assert str(lonely / "xdg" / "taskherd" / "taskherd.db") in result.stderr
    json.loads(result.stdout)  # stdout stays machine-readable


def test_without_any_config_a_write_is_refused_and_nothing_is_made(tmp_path):
    """A forgotten `cd`: `task add` outside any fleet would write to the platform's default
    database. It refuses (exit 2), says how to choose one, and makes no database; reads go
    on; TASKHERD_HOME names a database on purpose, and then the write goes through."""
    lonely = tmp_path / "nowhere"
    lonely.mkdir()
    refused = taskherd(lonely, "task", "add", "lost", "--role", "echo")
    assert refused.returncode == 2, refused.stderr
    assert "taskherd init" in refused.stderr and "TASKHERD_HOME" in refused.stderr
    assert "nothing was changed" in refused.stderr and "Traceback" not in refused.stderr
    assert not (lonely / "xdg" / "taskherd" / "taskherd.db").exists()
    for write in (["msg", "send", "ops", "hi"], ["cooldown", "clear", "claude"],
                  ["jobs", "delete", "nightly"], ["token", "create", "ci"]):
        assert taskherd(lonely, *write).returncode == 2, write
    assert not (lonely / "xdg" / "taskherd" / "taskherd.db").exists()

    assert taskherd(lonely, "task", "list", "--json").returncode == 0
    home = tmp_path / "chosen"
    env_added = subprocess.run([sys.executable, "-m", "taskherd", "task", "add", "kept",
                                "--role", "echo", "--json"], cwd=lonely, capture_output=True,
                               text=True, timeout=60,
                               env={**os.environ, "HOME": str(lonely), "TASKHERD_HOME": str(home)})
    assert env_added.returncode == 0, env_added.stderr
    assert json.loads(env_added.stdout)["title"] == "kept"
