"""A `command` role with prompt_via = "arg": the prompt is a positional argument after the
command's own '--', never an option, and never longer than the OS accepts."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from taskherd.config import parse_config
from taskherd.model.settings import ConfigError, RoleConfig
from taskherd.runtimes.base import RunFiles
from taskherd.runtimes.command import CommandRuntime

# A program that parses its options as most CLIs do (argparse honours '--').
PARSER = (
    "import argparse, sys\n"
    "p = argparse.ArgumentParser()\n"
    "p.add_argument('--permission-mode', default='ask')\n"
    "p.add_argument('prompt', nargs='?', default='')\n"
    "a = p.parse_args()\n"
    "print(a.permission_mode, len(a.prompt), len(sys.stdin.read()))\n"
)


def launch(prompt: str, tmp_path):
    role = RoleConfig(name="w", command=(sys.executable, "-c", PARSER, "--"), prompt_via="arg")
    task = SimpleNamespace(id=1, prompt=prompt)
    run = SimpleNamespace(id=1, role="w")
    files = RunFiles(log=tmp_path / "run.log", prompt=tmp_path / "run.prompt")
    return CommandRuntime().launch(role, task, run, files, prompt)


def run_launch(spec) -> str:
    stdin = open(spec.stdin_path, "rb") if spec.stdin_path else subprocess.DEVNULL
    try:
        done = subprocess.run(spec.argv, stdin=stdin, capture_output=True, text=True, timeout=30)
    finally:
        if spec.stdin_path:
            stdin.close()
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_prompt_starting_with_dashes_is_the_programs_argument(tmp_path):
    prompt = "--permission-mode=bypassPermissions hello"
    assert run_launch(launch(prompt, tmp_path)) == ["ask", str(len(prompt)), "0"]


def test_a_prompt_too_long_for_one_argument_goes_on_stdin(tmp_path):
    prompt = "x" * 200_000  # Linux refuses one argument over 128 KiB
    spec = launch(prompt, tmp_path)
    assert all(len(arg) < 100_000 for arg in spec.argv)
    assert run_launch(spec) == ["ask", "0", str(len(prompt))]


def test_prompt_via_arg_requires_a_final_double_dash(tmp_path):
    raw = {"roles": {"w": {"command": ["agent", "--fast"], "prompt_via": "arg"}}}
    with pytest.raises(ConfigError, match=r"roles\.w\.command .*must end with '--'"):
        parse_config(raw, base_dir=tmp_path)
    raw["roles"]["w"]["command"].append("--")
    assert parse_config(raw, base_dir=tmp_path).roles["w"].command[-1] == "--"
