"""Bytes that are not UTF-8, wherever a person or a program can hand them to the CLI (an
argument, a prompt file, stdin, an import line, the config file): exit 2, a message naming
where, no traceback, and nothing changed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.acceptance.test_cli_bad_input import CONFIG, snapshot

LATIN1 = "café".encode("latin-1")  # b'caf\xe9': valid Latin-1, invalid UTF-8


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "taskherd.toml").write_text(CONFIG)
    (tmp_path / "prompt.txt").write_bytes(b"fix the " + LATIN1 + b" page\n")
    (tmp_path / "tasks.jsonl").write_bytes(
        b'{"role": "coder", "title": "fine"}\n{"role": "coder", "title": "' + LATIN1 + b'"}\n')
    (tmp_path / "latin1.toml").write_bytes(CONFIG.encode() + b"# " + LATIN1 + b"\n")
    run(tmp_path, [b"status"])  # create the database, so "nothing changed" is checked on it
    return tmp_path


def run(folder, args: list[bytes], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHERD_")}
    env |= {"TASKHERD_HOME": str(folder / "home"), "TASKHERD_CONFIG": str(folder / "taskherd.toml")}
    return subprocess.run([sys.executable.encode(), b"-m", b"taskherd", *args], cwd=folder,
                          env=env, input=stdin, capture_output=True, timeout=60)


CASES = [
    ("a title argument", [b"task", b"add", LATIN1, b"-r", b"coder"], None, "title"),
    ("a prompt argument", [b"task", b"add", b"t", b"-r", b"coder", b"-p", LATIN1], None, "prompt"),
    ("a prompt file", [b"task", b"add", b"t", b"-r", b"coder", b"--prompt-file", b"prompt.txt"],
     None, "--prompt-file"),
    ("a prompt on stdin", [b"task", b"add", b"t", b"-r", b"coder", b"--prompt-file", b"-"],
     b"stdin " + LATIN1, "--prompt-file"),
    ("an import line", [b"task", b"import", b"tasks.jsonl"], None, "line 2"),
    ("an import on stdin", [b"task", b"import", b"-"], LATIN1 + b"\n", "line 1"),
    ("the config file", [b"--config", b"latin1.toml", b"status"], None, "latin1.toml"),
]


@pytest.mark.parametrize(("args", "stdin", "names"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bytes_that_are_not_utf8_are_bad_input(workspace, args, stdin, names):
    before = snapshot(workspace)
    result = run(workspace, args, stdin)
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2, stderr
    assert names in stderr and "UTF-8" in stderr, stderr
    assert "Traceback" not in stderr
    assert snapshot(workspace) == before
